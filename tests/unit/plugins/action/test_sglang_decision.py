"""sglang_decision takes the plan, the gathered state and the dry run as its arguments (nothing from the task's
variables: the run below has none)."""
import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.gpuops.sglang.plugins.action.sglang_decision import ActionModule

FILES = [{'label': 'launch configuration', 'path': '/etc/sglang/launch.json', 'candidate': '/etc/sglang/launch.next.json',
          'mode': '0600', 'systemd_only': False},
         {'label': 'systemd unit', 'path': '/etc/systemd/system/sglang.service',
          'candidate': '/etc/sglang/sglang.service.next', 'mode': '0644', 'systemd_only': True}]
STATE = {'service_manager': 'systemd', 'python_exists': True, 'running': True, 'healthy': True, 'mismatches': [],
         'configs_changed': [], 'patch': {'proven': False}, 'adaptive_tiers': None}


def arguments(state=None, **overrides):
    found = {'adaptive': False, 'files': FILES, 'state': dict(STATE, **(state or {})),
             'force_restart': False, 'patch_file': '', 'python': '/opt/py', 'host': 'gpu1'}
    found.update(overrides)
    return found


def decide(run_action, arguments):
    return run_action(ActionModule, {}, args=arguments)


def test_a_serving_host_with_nothing_changed_is_left_as_it_is(run_action):
    decision = decide(run_action, arguments())
    assert decision['redeploy_needed'] is False and decision['reasons'] == [] and decision['writes'] == []
    assert decision['guard_files'] == ['/etc/sglang/launch.json', '/etc/systemd/system/sglang.service']
    assert decision['manager'] == 'systemd' and decision['patch_due'] is False


def test_changed_files_are_written_and_a_due_patch_is_applied(run_action):
    check = {'changed': True, 'applied': False, 'files': ['sglang/x.py'], 'site_packages': '/sp'}
    decision = decide(run_action, arguments({'configs_changed': ['launch configuration'],
                                                       'service_manager': 'detached'},
                                                      patch_check=check, patch_file='p.diff'))
    assert decision['reasons'] == ['patch not applied', 'launch configuration changed']
    assert [pair['label'] for pair in decision['writes']] == ['launch configuration']
    # Detached: the unit is neither written nor saved.
    assert decision['guard_files'] == ['/etc/sglang/launch.json', '/sp/sglang/x.py']
    assert decision['patch_due'] is True and decision['patch_state'] == check


@pytest.mark.parametrize('state, adaptive, words', [
    ({'python_exists': False}, False, 'sglang_python /opt/py does not exist on gpu1'),
    ({'adaptive_tiers': False}, True, 'reads one flat list of candidate steps and would ignore them'),
    ({'folders_untrusted': [{'folder': '/var/log/sglang', 'why': '/var/log is writable by its group (mode 0775)'}]},
     False, "the server's files on gpu1 would live in folders another user could write into: /var/log/sglang, as"
            " /var/log is writable by its group (mode 0775). Use folders that root owns"),
], ids=['no-interpreter', 'no-tiers', 'untrusted-folder'])
def test_a_host_that_could_not_run_the_server_is_refused(run_action, state, adaptive, words):
    decision = decide(run_action, arguments(state, adaptive=adaptive))
    assert decision['failed'] is True and words in decision['msg']


def test_a_skipped_dry_run_reads_as_no_dry_run(run_action):
    decision = decide(run_action, arguments(patch_check={'skipped': True, 'changed': False}, patch_file='p.diff',
                                            state={'patch': {'proven': True}}))
    assert decision['redeploy_needed'] is False and decision['patch_due'] is False


def test_a_missing_argument_is_refused(run_action):
    given = arguments()
    del given['state']
    with pytest.raises(AnsibleActionFail, match='missing required arguments: state'):
        decide(run_action, given)
