"""sglang_report builds the role's report from the step results and settings it is given, writes it and publishes it
(no task variable is read: the runs below have none but hostvars)."""
import json
import os

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.gpuops.sglang.plugins.action.sglang_report import ActionModule
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _report

SETTINGS = {'patch_file': '', 'router_url': '', 'rollback_deadline': 1800, 'rollback_idle': 90,
            'guard_dir': '/var/lib/gpuops-sglang/sglang'}
RUN = {
    'state': {'service_manager': 'systemd', 'healthy': True},
    'decision': {'reasons': ['force_restart'], 'redeploy_needed': True, 'patch_state': {}},
    'run_id': 'gpu1-1', 'window_opened': True, 'kill': {}, 'patch': {},
    'stop': {'stopped_at': 10.0, 'stopping': [{'pid': 3}]},
    'gpu_release': {'awaited': {'gone_at': 11.0}, 'elapsed': 0.2},
    'start': {'started_at': 11.5, 'healthy_at': 13.25, 'healthy': True},
}


def build(run_action, run=None, check_mode=False, task_vars=None, **args):
    """The report of `run` (RUN by default) with SETTINGS, as the role's tasks ask for it."""
    given = dict({'run': RUN if run is None else run, 'settings': SETTINGS, 'host': 'gpu1'}, **args)
    return run_action(ActionModule, task_vars or {}, args=given, check_mode=check_mode)


def test_a_redeployed_host_gets_its_report_written_twice_and_published(run_action, tmp_path):
    result = build(run_action, report_dir=str(tmp_path))
    report = result['report']
    assert report['status'] == 'redeployed' and report['reason'] == 'force_restart' and report['downtime_s'] == 3.25
    assert report['phases_s'] == {'stop': 1.0, 'kill': None, 'gpu_release': 0.2, 'start': 1.75}
    assert sorted(path.name for path in tmp_path.iterdir()) == ['gpu1.json', 'gpu1.last-redeploy.json']
    assert json.loads((tmp_path / 'gpu1.json').read_text()) == report
    assert result['ansible_stats'] == {'data': {'sglang_redeploy': {'gpu1': report}}, 'aggregate': True,
                                       'per_host': False}


def test_a_host_whose_steps_never_ran_is_reported_with_every_key(run_action):
    result = build(run_action, {'skip_reason': 'sglang_redeploy_skip is set for this host'}, host='gpu2')
    assert result['report']['status'] == 'skipped' and result['report']['healthy'] is None
    assert result['report']['router']['member'] is None and result['written'] == []


def test_the_window_open_report_says_where_the_guard_reports(run_action, tmp_path):
    result = build(run_action, dict(RUN, start={}), report_dir=str(tmp_path), stage='opened')
    assert result['report']['status'] == 'failed'
    assert result['report']['reason'].endswith('writes its report to /var/lib/gpuops-sglang/sglang/fired.json')
    assert [path.name for path in tmp_path.iterdir()] == ['gpu1.json']


def test_check_mode_publishes_but_never_replaces_a_real_report(run_action, tmp_path):
    result = build(run_action, check_mode=True, report_dir=str(tmp_path))
    assert result['written'] == [] and list(tmp_path.iterdir()) == []
    assert result['report']['status'] == 'unchanged' and result['report']['check_mode'] is True


def test_a_given_report_is_published_as_it_is(run_action, tmp_path):
    result = run_action(ActionModule, {}, args={'report': {'status': 'failed', 'host': 'x'}, 'host': 'x',
                                                'report_dir': str(tmp_path / 'new')})
    assert result['report'] == {'status': 'failed', 'host': 'x'}
    assert json.loads((tmp_path / 'new' / 'x.json').read_text()) == {'status': 'failed', 'host': 'x'}


def test_a_final_report_that_cannot_be_written_is_still_returned_and_published(run_action, tmp_path):
    # The gate of the fleet's later hosts and the slot's release need the report; the role fails the host after.
    blocked = tmp_path / 'not-a-folder'
    blocked.write_text('')
    result = build(run_action, report_dir=str(blocked))
    assert not result.get('failed') and result['report']['status'] == 'redeployed'
    assert result['written'] == [] and result['write_error'].startswith('could not write the report of gpu1 to ')
    assert result['warnings'] == [result['write_error']]
    assert result['ansible_stats']['data']['sglang_redeploy']['gpu1'] == result['report']


def test_a_window_open_report_that_cannot_be_written_fails_before_the_window_opens(run_action, tmp_path):
    blocked = tmp_path / 'not-a-folder'
    blocked.write_text('')
    with pytest.raises(AnsibleActionFail, match='could not write the report of gpu1 to '):
        build(run_action, dict(RUN, start={}), report_dir=str(blocked), stage='opened')


GROUP = {'name': 'big', 'rank': 0, 'nnodes': 2, 'nodes': ['gpu1', 'gpu2'], 'leader': 'gpu1',
         'dist_init_addr': '127.0.0.31:5000', 'leader_url': 'http://127.0.0.31:30000'}


def test_a_group_nodes_first_report_names_its_group_with_the_outcome_still_unknown(run_action):
    report = build(run_action, dict(RUN, group=GROUP))['report']
    assert report['group'] == {'name': 'big', 'nnodes': 2, 'rank': 0, 'outcome': None, 'failed_nodes': None}


def test_a_group_node_reports_the_groups_reasons_which_name_their_node(run_action):
    decided = {'redeploy_needed': True, 'reasons': ['gpu2: server not running', 'gpu1: generation fails: x']}
    report = build(run_action, dict(RUN, group=GROUP, group_decision=decided))['report']
    assert report['reasons'] == decided['reasons'] and report['status'] == 'redeployed'
    # A skipped group decision (a single-node server) leaves the host's own reasons.
    report = build(run_action, dict(RUN, group_decision={'skipped': True}))['report']
    assert report['reasons'] == ['force_restart']


@pytest.mark.parametrize('other, outcome, failed', [
    ({'status': 'redeployed'}, 'redeployed', []),
    ({'status': 'rolled_back'}, 'split', ['gpu2']),
    (None, 'split', ['gpu2']),
], ids=['same', 'ended-differently', 'no-report'])
def test_the_group_stage_reads_every_nodes_report_and_writes_the_outcome(run_action, tmp_path, other, outcome, failed):
    first = build(run_action, dict(RUN, group=GROUP))['report']
    hostvars = {'gpu2': {'sglang_redeploy_report': other} if other else {}}
    result = run_action(ActionModule, {'hostvars': hostvars}, args={
        'host': 'gpu1', 'stage': 'group', 'report': first, 'group': GROUP, 'report_dir': str(tmp_path)})
    assert result['report']['group'] == dict(first['group'], outcome=outcome, failed_nodes=failed)
    assert set(result['report']) == set(first)
    assert json.loads((tmp_path / 'gpu1.json').read_text()) == result['report']
    assert result['ansible_stats']['data']['sglang_redeploy']['gpu1'] == result['report']


def test_the_group_stage_leaves_a_single_servers_report_and_file_alone(run_action, tmp_path):
    first = build(run_action)['report']
    result = run_action(ActionModule, {}, args={'host': 'gpu1', 'stage': 'group', 'report': first, 'group': None,
                                                'report_dir': str(tmp_path)})
    assert result['report'] == first and result['written'] == [] and list(tmp_path.iterdir()) == []


def test_the_group_stage_before_the_report_is_refused(run_action):
    with pytest.raises(AnsibleActionFail, match='stage group takes this host.s final report'):
        run_action(ActionModule, {}, args={'host': 'gpu1', 'stage': 'group', 'group': GROUP})


def test_a_report_without_settings_is_refused(run_action):
    with pytest.raises(AnsibleActionFail, match='takes the run.s settings'):
        run_action(ActionModule, {}, args={'host': 'gpu1', 'run': RUN})


@pytest.mark.parametrize('host', ['../../escaped', 'a/b', '..', '.hidden'])
def test_a_host_name_that_leads_out_of_the_folder_keeps_its_reports_inside_it(run_action, tmp_path, host):
    # Ansible accepts '../../escaped' as an inventory name: joined as it was, the report went two folders up.
    reports = tmp_path / 'a' / 'b' / 'reports'
    result = build(run_action, host=host, report_dir=str(reports))
    assert os.listdir(str(tmp_path)) == ['a'] and os.listdir(str(tmp_path / 'a')) == ['b']
    assert os.listdir(str(reports.parent)) == ['reports']
    names = sorted(path.name for path in reports.iterdir())
    assert names == sorted(_report.report_files(host, 'redeployed')) and not any(name.startswith('.') for name in names)
    assert result['written'] == [str(reports / name) for name in _report.report_files(host, 'redeployed')]
