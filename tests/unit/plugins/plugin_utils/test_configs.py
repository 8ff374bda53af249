"""The files the role renders: which ones, where, with what mode and content."""
import json
import os
import posixpath

import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _configs

TEMPLATES_DIR = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'sglang', 'templates')


@pytest.fixture
def templates():
    found = {}
    for name in ('sglang.service.j2', 'server_keys.yaml.j2'):
        with open(os.path.join(TEMPLATES_DIR, name)) as handle:
            found[name] = handle.read()
    return found


@pytest.mark.parametrize('overrides, labels', [
    ({}, ['launch configuration', 'systemd unit']),
    ({'sglang_dynamic_spec_mode': 'adaptive'}, ['launch configuration', 'systemd unit', 'adaptive tiers']),
    ({'sglang_admin_api_key': 'admin'}, ['launch configuration', 'systemd unit', 'API keys']),
    ({'sglang_dynamic_spec_mode': 'adaptive', 'sglang_dynamic_spec_enabled': False, 'sglang_api_key': 'k'},
     ['launch configuration', 'systemd unit', 'API keys']),
], ids=['plain', 'adaptive', 'keyed', 'adaptive-off'])
def test_the_role_renders_the_files_its_settings_need(settings, templates, overrides, labels):
    settings.update(overrides)
    assert [entry['label'] for entry in _configs.configs(settings, [], templates)] == labels


def test_launch_configuration_is_nice_json_with_the_patchs_switch_and_the_secret_environment(settings, templates):
    # The compile caches' variables apart (test_sglang_plan_loading holds them).
    settings.update(sglang_environment={'A': '1', 'HF_TOKEN': 'public'}, sglang_secret_environment={'HF_TOKEN': 's'},
                    sglang_cache_dir='')
    launch = _configs.configs(settings, ['--port', '30000'], templates)[0]
    assert launch['path'] == '/etc/sglang/launch.json' and launch['candidate'] == '/etc/sglang/launch.next.json'
    assert launch['mode'] == '0600'
    assert json.loads(launch['content']) == {
        'python': '/opt/sglang/venv/bin/python', 'module': 'sglang.launch_server', 'args': ['--port', '30000'],
        'environment': {'A': '1', 'HF_TOKEN': 's', 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8'}}
    # Ansible's to_nice_json(indent=2): sorted keys, two spaces, a final newline.
    assert launch['content'].startswith('{\n  "args": [\n    "--port",') and launch['content'].endswith('}\n')


def test_systemd_unit_runs_the_launcher_with_the_stop_timeout(settings, templates):
    settings.update(sglang_service_name='sglang-b', sglang_term_timeout=45, sglang_config_dir='/srv/sg')
    unit = _configs.configs(settings, [], templates)[1]
    assert unit['path'] == '/etc/systemd/system/sglang-b.service' and unit['systemd_only'] is True
    assert 'ExecStart=/usr/bin/python3 /srv/sg/launcher.py run /srv/sg/launch.json\n' in unit['content']
    assert 'TimeoutStopSec=45\n' in unit['content'] and unit['content'].endswith('WantedBy=multi-user.target\n')


@pytest.mark.parametrize('overrides, lines, absent', [
    ({}, ['User=root\n', 'Group=root\n', 'RequiresMountsFor=/models/m\n', 'RequiresMountsFor=/models/draft\n'], []),
    ({'sglang_user': 'sglang', 'sglang_group': 'ml', 'sglang_draft_model_path': 'org/draft'},
     ['User=sglang\n', 'Group=ml\n', 'RequiresMountsFor=/models/m\n'], ['org/draft']),
    ({'sglang_model_path': 'org/model', 'sglang_draft_model_path': ''}, ['User=root\n'], ['RequiresMountsFor']),
    ({'sglang_model_path': '/srv/100%', 'sglang_draft_model_path': '/srv/100%'}, ['RequiresMountsFor=/srv/100%%\n'],
     []),
], ids=['root-with-folders', 'a-user-and-a-hub-draft', 'hub-ids', 'a-percent-once'])
def test_systemd_unit_runs_as_the_server_user_after_the_model_mounts(settings, templates, overrides, lines, absent):
    settings.update(overrides)
    unit = _configs.configs(settings, [], templates)[1]['content']
    assert all(line in unit for line in lines) and not any(text in unit for text in absent)
    assert unit.count('RequiresMountsFor=') == len([line for line in lines if line.startswith('RequiresMountsFor=')])
    # The mounts belong to [Unit], the user to [Service].
    assert unit.index('[Service]') < unit.index('User=') and all(
        unit.index(line) < unit.index('[Service]') for line in lines if line.startswith('RequiresMountsFor='))


@pytest.mark.parametrize('user, mode', [('root', '0600'), ('sglang', '0640')])
def test_secret_files_are_readable_by_the_server_group_only_for_another_user(settings, templates, user, mode):
    settings.update(sglang_user=user, sglang_api_key='k')
    files = dict((entry['label'], entry['mode']) for entry in _configs.configs(settings, [], templates))
    assert files['launch configuration'] == mode and files['API keys'] == mode and files['systemd unit'] == '0644'


def test_adaptive_tiers_file_holds_the_derived_tiers(settings, templates):
    settings.update(sglang_dynamic_spec_mode='adaptive')
    tiers = _configs.configs(settings, [], templates)[2]
    assert tiers['path'] == '/etc/sglang/adaptive_spec.json' and tiers['mode'] == '0644'
    assert json.loads(tiers['content']) == {'1': {'candidate_steps': [1, 3]}, '8': {'candidate_steps': [0]}}


def test_keys_file_holds_only_the_keys_that_are_set(settings, templates):
    settings.update(sglang_api_key='k3y"q')
    keys = _configs.configs(settings, [], templates)[2]
    assert keys['path'] == '/etc/sglang/server.yaml' and keys['mode'] == '0600'
    assert 'api-key: "k3y\\"q"\n' in keys['content'] and 'admin-api-key' not in keys['content']


@pytest.mark.parametrize('manager, labels', [('systemd', ['launch configuration', 'systemd unit']),
                                             ('detached', ['launch configuration'])])
def test_pairs_name_the_unit_only_where_systemd_runs_the_server(settings, templates, manager, labels):
    pairs = _configs.pairs(_configs.configs(settings, [], templates), manager)
    assert [pair['label'] for pair in pairs] == labels
    assert all(set(pair) == {'label', 'mode', 'candidate', 'live'} for pair in pairs)


def test_paths_follow_the_service_name_and_folders(settings):
    settings.update(sglang_service_name='sg2', sglang_host='0.0.0.0', sglang_port='30001')
    where = _configs.paths(settings)
    assert where['pidfile'] == '/run/sglang/sg2.pid' and where['stop_marker'] == '/run/sglang/sg2.stopped_at'
    assert where['guard_dir'] == '/var/lib/gpuops-sglang/sg2' and where['base_url'] == 'http://0.0.0.0:30001'
    assert where['patch_stamp'] == '/etc/sglang/patch.stamp.json'
    assert where['folders'] == ['/etc/sglang', '/run/sglang', posixpath.dirname(settings['sglang_log_file'])]


def test_a_folder_named_twice_is_listed_once(settings):
    settings.update(sglang_config_dir='/srv/sglang', sglang_run_dir='/srv/sglang', sglang_log_file='/srv/sglang/log')
    assert _configs.paths(settings)['folders'] == ['/srv/sglang']


# -e sglang_dynamic_spec_enabled=false arrives as the string 'false': off, as the operator meant.
@pytest.mark.parametrize('enabled, mode, switched', [
    (True, 'env', True), ('true', 'env', True), ('yes', 'env', True),
    (False, 'env', False), ('false', 'env', False), ('no', 'env', False), ('0', 'env', False),
    ('false', 'adaptive', False), ('true', 'adaptive', False),
])
def test_the_patchs_switch_is_set_only_when_env_mode_is_on(settings, enabled, mode, switched):
    settings.update(sglang_dynamic_spec_enabled=enabled, sglang_dynamic_spec_mode=mode)
    assert bool(_configs.dynamic_environment(settings)) is switched


@pytest.mark.parametrize('enabled, labels', [
    ('false', ['launch configuration', 'systemd unit']),
    ('true', ['launch configuration', 'systemd unit', 'adaptive tiers']),
], ids=['extra-var-false', 'extra-var-true'])
def test_adaptive_mode_turned_off_from_the_command_line_renders_no_tiers(settings, templates, enabled, labels):
    settings.update(sglang_dynamic_spec_enabled=enabled, sglang_dynamic_spec_mode='adaptive')
    assert [entry['label'] for entry in _configs.configs(settings, [], templates)] == labels


# A dry run shows no diff of these: the keys file always holds keys, the launch configuration only a secret environment.
@pytest.mark.parametrize('overrides, secret', [
    ({}, []),
    ({'sglang_api_key': 'k'}, ['API keys']),
    ({'sglang_secret_environment': {'HF_TOKEN': 'hf_x'}}, ['launch configuration']),
    ({'sglang_secret_environment': {'HF_TOKEN': 'hf_x'}, 'sglang_admin_api_key': 'a'}, ['launch configuration', 'API keys']),
], ids=['none', 'keyed', 'secret-environment', 'both'])
def test_the_files_that_carry_a_secret_are_named(settings, templates, overrides, secret):
    settings.update(overrides)
    assert _configs.secret_labels(settings) == secret
    labels = [entry['label'] for entry in _configs.configs(settings, [], templates)]
    assert set(secret) <= set(labels)
