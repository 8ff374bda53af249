"""The redeploy decision from the gathered state: the reasons, the patch as the window sees it, what is saved."""
import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _decision

SERVING = {'python_exists': True, 'running': True, 'healthy': True, 'mismatches': [], 'configs_changed': [],
           'patch': {'proven': False}, 'adaptive_tiers': None}


@pytest.mark.parametrize('state, check, force, reasons', [
    ({}, {}, False, []),
    ({}, {}, True, ['force_restart']),
    ({}, {'changed': True}, False, ['patch not applied']),
    ({'configs_changed': ['launch configuration', 'API keys']}, {}, False,
     ['launch configuration changed', 'API keys changed']),
    ({'running': False, 'healthy': False}, {}, False, ['server not running']),
    ({'healthy': False}, {}, False, ['server not healthy']),
    ({'mismatches': ['max_running_requests is 64, want 96', 'tp_size is 1, want 2']}, {}, False,
     ['running server differs: max_running_requests is 64, want 96, tp_size is 1, want 2']),
    ({'configs_changed': ['systemd unit'], 'healthy': False}, {'changed': True}, True,
     ['force_restart', 'patch not applied', 'systemd unit changed', 'server not healthy']),
], ids=['nothing', 'forced', 'patch', 'files', 'not-running', 'not-healthy', 'differs', 'all-in-order'])
def test_reasons_say_why_the_server_is_redeployed(state, check, force, reasons):
    assert _decision.reasons(dict(SERVING, **state), check, force) == reasons


OWED = {'router_url': 'http://10.0.0.5:30080', 'worker_url': 'http://gpu1:30000', 'run_id': 'gpu1-r1', 'at': 1.0,
        'why': 'the router did not admit it'}


@pytest.mark.parametrize('owed, router_url, found', [
    (None, 'http://10.0.0.5:30080', None),
    (OWED, 'http://10.0.0.5:30080', OWED),
    (OWED, 'http://10.0.0.5:30080/', OWED),
    (OWED, 'http://10.0.0.6:30080', None),
    (OWED, '', None),
    ({}, 'http://10.0.0.5:30080', None),
], ids=['none-owed', 'owed', 'trailing-slash', 'another-router', 'no-router', 'empty-record'])
def test_a_readmission_is_owed_only_to_the_router_configured_now(owed, router_url, found):
    assert _decision.readmission_owed(dict(SERVING, guard_router_owed=owed), router_url) == found


def test_an_owed_readmission_is_a_reason_and_comes_after_force_restart():
    assert _decision.reasons(SERVING, {}, True, OWED) == ['force_restart',
                                                          'left out of the router by the restore of run gpu1-r1']


@pytest.mark.parametrize('state, python, adaptive, problem', [
    ({}, '/opt/venv/bin/python', False, ''),
    ({'python_exists': False}, '/opt/venv/bin/python', False,
     'sglang_python /opt/venv/bin/python does not exist on gpu1; point it at the interpreter whose site-packages'
     ' holds sglang.'),
    ({'adaptive_tiers': True}, '/opt/venv/bin/python', True, ''),
    ({'adaptive_tiers': False}, '/opt/venv/bin/python', True,
     'sglang_dynamic_spec_mode adaptive needs an sglang whose --speculative-adaptive-config takes batch-size tiers'
     ' (0.5.23 does); the sglang of /opt/venv/bin/python on gpu1 reads one flat list of candidate steps and would'
     ' ignore them. Use sglang_dynamic_spec_mode env with the patch, or an sglang release with tiers.'),
    ({'adaptive_tiers': None}, '/opt/venv/bin/python', True,
     'sglang_dynamic_spec_mode adaptive needs an sglang whose --speculative-adaptive-config takes batch-size tiers'
     ' (0.5.23 does); the sglang of /opt/venv/bin/python on gpu1 could not be read. Use sglang_dynamic_spec_mode'
     ' env with the patch, or an sglang release with tiers.'),
    ({'adaptive_tiers': False}, '/opt/venv/bin/python', False, ''),
    ({'server_access': {'user': 'sglang', 'group': 'sglang', 'checked': ['/models/m'], 'skipped': [], 'problems': []}},
     '/opt/venv/bin/python', False, ''),
    ({'server_access': {'user': 'sglang', 'group': 'ml', 'checked': ['/models/m', '/models/d'], 'skipped': [],
                        'problems': [{'label': 'sglang_model_path', 'path': '/models/m',
                                      'why': 'cannot be listed (Permission denied)'},
                                     {'label': 'sglang_draft_model_path', 'path': '/models/d', 'why': 'does not exist'}]}},
     '/opt/venv/bin/python', False,
     "the server's user sglang (group ml) cannot load what the server reads on gpu1, checked as that user:"
     ' sglang_model_path /models/m cannot be listed (Permission denied); sglang_draft_model_path /models/d does not'
     ' exist. Give that user read access to each folder, its files and every folder above it (chmod, chgrp or an ACL;'
     ' on NFS with root_squash, on the file server), or set sglang_user and sglang_group to a user that has it.'),
    ({'server_access': {'user': None, 'group': None, 'checked': [], 'skipped': [],
                        'problems': [{'label': 'user', 'path': None,
                                      'why': 'the user sglang does not exist on this host'}]}},
     '/opt/venv/bin/python', False,
     'the server cannot run as its user on gpu1: the user sglang does not exist on this host. Create it there'
     ' (useradd --system), or set sglang_user and sglang_group to a user and group that exist.'),
], ids=['fine', 'no-interpreter', 'adaptive-with-tiers', 'adaptive-flat-list', 'adaptive-unreadable', 'env-mode',
        'server-user-reads-the-model', 'server-user-cannot-read-the-model', 'server-user-missing'])
def test_host_problems_refuse_what_the_server_could_not_run(state, python, adaptive, problem):
    assert _decision.host_problems(dict(SERVING, **state), python, 'gpu1', adaptive) == problem


STAMPED = {'proven': True, 'files': ['sglang/srt/a.py'], 'site_packages': '/sp', 'patch_sha256': 'abc'}
DRY_RUN = {'changed': True, 'applied': False, 'files': ['sglang/srt/b.py'], 'site_packages': '/sp2'}


@pytest.mark.parametrize('stamp, check, patch_file, state, due', [
    (STAMPED, {'skipped': True}, 'p.diff', dict(STAMPED, changed=False, applied=True), False),
    ({'proven': False}, DRY_RUN, 'p.diff', DRY_RUN, True),
    ({'proven': False}, {'changed': False, 'applied': True}, 'p.diff', {'changed': False, 'applied': True}, False),
    ({'proven': False}, {}, '', {}, False),
], ids=['stamp-proves-it', 'dry-run-says-due', 'dry-run-found-it-in', 'no-patch'])
def test_patch_state_comes_from_the_stamp_or_the_dry_run(stamp, check, patch_file, state, due):
    patch = _decision.patch_state(dict(SERVING, patch=stamp), check, patch_file)
    assert patch == state
    assert _decision.patch_due(patch_file, patch) is due


def test_guard_saves_every_live_file_and_every_patched_file():
    pairs = [{'label': 'launch configuration', 'live': '/etc/sglang/launch.json'},
             {'label': 'systemd unit', 'live': '/etc/systemd/system/sglang.service'}]
    assert _decision.guard_files(pairs, DRY_RUN) == ['/etc/sglang/launch.json', '/etc/systemd/system/sglang.service',
                                                     '/sp2/sglang/srt/b.py']
    assert _decision.guard_files(pairs[:1], {}) == ['/etc/sglang/launch.json']


PAIRS = [{'label': 'launch configuration', 'mode': '0640', 'candidate': '/etc/sglang/.launch.json.new',
          'live': '/etc/sglang/launch.json'},
         {'label': 'systemd unit', 'mode': '0644', 'candidate': '/etc/systemd/system/.sglang.service.new',
          'live': '/etc/systemd/system/sglang.service'}]
DECIDED = {'reasons': ['launch configuration changed'], 'redeploy_needed': True, 'patch_due': True,
           'changed_configs': ['launch configuration'], 'writes': PAIRS[:1],
           'guard_files': ['/etc/sglang/launch.json', '/etc/systemd/system/sglang.service', '/sp/sglang/worker.py']}


def test_a_redeploy_is_decided_as_it_was_with_no_undo():
    assert _decision.undo(DECIDED, None, PAIRS) == dict(DECIDED, undo=None)


@pytest.mark.parametrize('restored, daemon_reload', [
    (['/etc/sglang/launch.json', '/sp/sglang/worker.py'], False),
    (['/etc/systemd/system/sglang.service'], True),
])
def test_an_undo_redeploys_to_put_the_revision_back_and_writes_nothing_of_the_inventorys(restored, daemon_reload):
    plan = {'target': 1, 'run_id': 'run-1', 'latest': 3, 'kept': [1, 2, 3], 'guard_files': restored + ['/opt/sglang/extra.py'],
            'files': [{'path': path, 'action': 'write', 'source': 2, 'sha256': 'ab'} for path in restored]}
    decided = _decision.undo(DECIDED, plan, PAIRS)
    assert decided['reasons'] == ['undo to revision 1'] and decided['redeploy_needed'] is True
    assert decided['patch_due'] is False and decided['writes'] == [] and decided['changed_configs'] == []
    # The usual files first, then the undo's others, each once.
    assert decided['guard_files'] == DECIDED['guard_files'] + ['/opt/sglang/extra.py']
    assert decided['undo'] == {'target': 1, 'run_id': 'run-1', 'latest': 3, 'files': restored, 'daemon_reload': daemon_reload}
