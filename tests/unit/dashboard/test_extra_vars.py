"""What a dashboard request may set (issue 28: a redeploy button, not a shell): the variables only the inventory
sets, and the one controller file a request may ship to the GPU hosts (sglang_patch_file)."""
import os

import pytest

from gpuops_dashboard import extra_vars

# What a token holder could otherwise choose, and why it is the inventory's.
PINNED_FOR_ROOT = [
    ('sglang_python', '/bin/sh', 'the interpreter the server runs as root'),
    ('sglang_launch_module', 'pty', 'the module the server runs as root'),
    ('sglang_environment', {'LD_PRELOAD': '/tmp/evil.so'}, 'the environment of a root process'),
    ('sglang_secret_environment', {'HF_TOKEN': 'x'}, 'the environment of a root process'),
    ('sglang_dynamic_spec_env_name', 'LD_PRELOAD', 'a variable of a root process\'s environment'),
    ('sglang_kill_patterns', ['sshd'], 'what the run kills'),
    ('sglang_config_dir', '/etc/cron.d', 'a path the role writes as root'),
    ('sglang_run_dir', '/etc', 'a path the role writes as root'),
    ('sglang_log_file', '/etc/passwd', 'a path the role writes as root'),
    ('sglang_guard_dir', '/root/.ssh', 'a path the role writes as root'),
    ('sglang_service_name', 'sshd', 'the unit and pid file the role writes and stops as root'),
    ('sglang_service_manager', 'systemd', 'how the server is run as root'),
    ('sglang_fleet_hosts', [], 'the fleet\'s membership'),
    ('sglang_fleet_group', 'none', 'the fleet\'s membership'),
    ('sglang_router_worker_url', 'http://elsewhere:1', 'where the router sends this server\'s traffic'),
    ('sglang_dist_init_addr', 'elsewhere:1', 'where the ranks of a server group meet'),
    ('sglang_dist_init_port', 1, 'where the ranks of a server group meet'),
    ('sglang_api_key', 'k', 'it belongs in the inventory\'s vault'),
    ('sglang_admin_api_key', 'k', 'it belongs in the inventory\'s vault'),
    ('sglang_router_api_key', 'k', 'it belongs in the inventory\'s vault'),
    ('sglang_router_url', 'http://elsewhere:1', 'where the run sends the router\'s API key'),
    ('sglang_report_dir', '/etc/cron.d', 'a folder the run writes on the controller'),
    ('pve_vmid', 100, 'each host\'s own container'),
    # The run sends the server's API key to sglang_host:sglang_port and believes what answers there.
    ('sglang_host', 'elsewhere.example', 'where the run sends the server\'s API key'),
    ('sglang_port', 1, 'where the run sends the server\'s API key'),
    ('sglang_extra_args', ['--enable-custom-logit-processor'], 'let its clients run code'),
]


@pytest.mark.parametrize('key, value, reason', PINNED_FOR_ROOT)
def test_a_pinned_variable_is_refused_naming_it_and_why(key, value, reason):
    assert key in extra_vars.role_variables(), 'not a documented variable of the role: %s' % key
    with pytest.raises(extra_vars.InvalidExtraVars) as refused:
        extra_vars.validate({key: value})
    assert refused.value.key == key
    assert str(refused.value).startswith('extra_vars.%s: is set by the inventory only (' % key)
    assert reason in str(refused.value)
    assert key not in extra_vars.allowed_variables()


# What a redeploy legitimately varies stays the token holder's.
VARIED = {
    'sglang_model_path': '/models/next', 'sglang_draft_model_path': '/models/next-draft',
    'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': 3, 'sglang_speculative_eagle_topk': 1,
    'sglang_speculative_num_draft_tokens': 4, 'sglang_dynamic_spec_enabled': True,
    'sglang_dynamic_spec_batch_size_threshold': 16, 'sglang_dynamic_spec_mode': 'env',
    'sglang_dynamic_spec_adaptive_config': {'1': {'candidate_steps': [1, 3, 5]}, '32': {'candidate_steps': [0]}},
    'sglang_patch_file': '', 'sglang_term_timeout': 5, 'sglang_health_timeout': 600, 'sglang_rollback_deadline': 900,
    'sglang_perf_gate': True, 'sglang_perf_levels': [1, 32], 'redeploy_canary': 1, 'redeploy_serial': '25%',
    'redeploy_max_unavailable': 1, 'redeploy_max_fail_percentage': 0, 'sglang_force_restart': True,
    'sglang_redeploy_skip': False, 'sglang_ready_checks': 3, 'sglang_generate_probe': True,
}


def test_what_a_redeploy_varies_is_still_taken():
    assert extra_vars.validate(VARIED, patch_dirs=extra_vars.patch_folders(extra_vars.DEFAULT_PATCH_DIRS)) == VARIED


@pytest.fixture
def tree(tmp_path):
    """patches/ (the allowed folder) and what sits around it, by name."""
    patches = tmp_path / 'patches'
    (patches / 'sub').mkdir(parents=True)
    (patches / 'ok.diff').write_text('diff\n')
    (patches / 'sub' / 'deeper.diff').write_text('diff\n')
    (tmp_path / 'id_ed25519').write_text('secret\n')
    (tmp_path / 'patches-evil').mkdir()
    (tmp_path / 'patches-evil' / 'x.diff').write_text('diff\n')
    (patches / 'to-key.diff').symlink_to(tmp_path / 'id_ed25519')
    (patches / 'to-ok.diff').symlink_to(patches / 'ok.diff')
    (patches / 'out').symlink_to(tmp_path)
    os.mkfifo(str(patches / 'fifo.diff'))
    (tmp_path / 'linked-patches').symlink_to(patches)
    return tmp_path


# (the request's value: a path under tree unless '' or relative; the file the run reads, under tree, or the
# refusal's words)
PATCH_CASES = [
    ('', ('reads', '')),
    ('patches/ok.diff', ('reads', 'patches/ok.diff')),
    ('patches/sub/deeper.diff', ('reads', 'patches/sub/deeper.diff')),
    ('patches/./sub/../ok.diff', ('reads', 'patches/ok.diff')),
    ('patches/to-ok.diff', ('reads', 'patches/ok.diff')),
    ('linked-patches/ok.diff', ('reads', 'patches/ok.diff')),
    ('patches/../id_ed25519', ('refused', 'leads elsewhere')),
    ('patches/to-key.diff', ('refused', 'leads elsewhere')),
    ('patches/out/id_ed25519', ('refused', 'leads elsewhere')),
    ('patches-evil/x.diff', ('refused', 'leads elsewhere')),
    ('id_ed25519', ('refused', 'leads elsewhere')),
    ('patches', ('refused', 'leads elsewhere')),
    ('patches/sub', ('refused', 'is not one')),
    ('patches/missing.diff', ('refused', 'is not one')),
    ('patches/fifo.diff', ('refused', 'is not one')),
    ('relative:ok.diff', ('refused', 'an absolute path')),
]


@pytest.mark.parametrize('given, outcome', PATCH_CASES)
def test_a_patch_file_must_be_a_regular_file_inside_the_patch_folders(tree, given, outcome):
    # The folder as the operator named it, through a symlink: the rule holds for its real path.
    folders = extra_vars.patch_folders([str(tree / 'linked-patches')])
    if given.startswith('relative:'):
        value = given[len('relative:'):]
    else:
        value = str(tree / given) if given else ''
    kind, expected = outcome
    if kind == 'reads':
        assert extra_vars.patch_file(value, folders) == (os.path.realpath(str(tree / expected)) if expected else '')
        return
    with pytest.raises(extra_vars.InvalidExtraVars) as refused:
        extra_vars.patch_file(value, folders)
    assert refused.value.key == 'sglang_patch_file'
    assert expected in str(refused.value)
    # The message names the folders a patch may come from.
    assert os.path.realpath(str(tree / 'patches')) in str(refused.value)


def test_validate_hands_on_the_resolved_patch_and_refuses_one_outside():
    folders = extra_vars.patch_folders(extra_vars.DEFAULT_PATCH_DIRS)
    shipped = os.path.join(folders[0], 'eagle_dynamic_spec_threshold.diff')
    given = os.path.join(folders[0], '.', 'eagle_dynamic_spec_threshold.diff')
    assert extra_vars.validate({'sglang_patch_file': given}, patch_dirs=folders) == {'sglang_patch_file': shipped}
    with pytest.raises(extra_vars.InvalidExtraVars) as refused:
        extra_vars.validate({'sglang_patch_file': '/etc/passwd'}, patch_dirs=folders)
    assert refused.value.key == 'sglang_patch_file'


def test_a_patch_folder_that_is_not_a_folder_is_an_error(tmp_path):
    (tmp_path / 'file').write_text('')
    for folder in (tmp_path / 'missing', tmp_path / 'file'):
        with pytest.raises(ValueError, match='patch folder .* is not a folder'):
            extra_vars.patch_folders([str(folder)])
