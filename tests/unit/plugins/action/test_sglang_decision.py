"""sglang_decision reads the plan, the gathered state and the dry run from the task variables."""
import pytest

from ansible_collections.gpuops.sglang.plugins.action.sglang_decision import ActionModule

FILES = [{'label': 'launch configuration', 'path': '/etc/sglang/launch.json', 'candidate': '/etc/sglang/launch.next.json',
          'mode': '0600', 'systemd_only': False},
         {'label': 'systemd unit', 'path': '/etc/systemd/system/sglang.service',
          'candidate': '/etc/sglang/sglang.service.next', 'mode': '0644', 'systemd_only': True}]
STATE = {'service_manager': 'systemd', 'python_exists': True, 'running': True, 'healthy': True, 'mismatches': [],
         'configs_changed': [], 'patch': {'proven': False}, 'adaptive_tiers': None}


def task_vars(state=None, **overrides):
    found = {'_sglang_plan': {'adaptive': False, 'files': FILES}, '_sglang_state': dict(STATE, **(state or {})),
             'sglang_force_restart': False, 'sglang_patch_file': '', 'sglang_python': '/opt/py',
             'inventory_hostname': 'gpu1'}
    found.update(overrides)
    return found


def test_a_serving_host_with_nothing_changed_is_left_as_it_is(run_action):
    decision = run_action(ActionModule, task_vars())
    assert decision['redeploy_needed'] is False and decision['reasons'] == [] and decision['writes'] == []
    assert decision['guard_files'] == ['/etc/sglang/launch.json', '/etc/systemd/system/sglang.service']
    assert decision['manager'] == 'systemd' and decision['patch_due'] is False


def test_changed_files_are_written_and_a_due_patch_is_applied(run_action):
    check = {'changed': True, 'applied': False, 'files': ['sglang/x.py'], 'site_packages': '/sp'}
    decision = run_action(ActionModule, task_vars({'configs_changed': ['launch configuration'],
                                                   'service_manager': 'detached'},
                                                  _sglang_patch_check=check, sglang_patch_file='p.diff'))
    assert decision['reasons'] == ['patch not applied', 'launch configuration changed']
    assert [pair['label'] for pair in decision['writes']] == ['launch configuration']
    # Detached: the unit is neither written nor saved.
    assert decision['guard_files'] == ['/etc/sglang/launch.json', '/sp/sglang/x.py']
    assert decision['patch_due'] is True and decision['patch_state'] == check


@pytest.mark.parametrize('state, adaptive, words', [
    ({'python_exists': False}, False, 'sglang_python /opt/py does not exist on gpu1'),
    ({'adaptive_tiers': False}, True, 'reads one flat list of candidate steps and would ignore them'),
], ids=['no-interpreter', 'no-tiers'])
def test_a_host_that_could_not_run_the_server_is_refused(run_action, state, adaptive, words):
    decision = run_action(ActionModule, task_vars(state, _sglang_plan={'adaptive': adaptive, 'files': FILES}))
    assert decision['failed'] is True and words in decision['msg']
