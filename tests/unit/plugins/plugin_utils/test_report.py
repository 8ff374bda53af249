"""The report, case by case (report_cases.yml): every key, every message, for each way a run can end."""
import os

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _report

with open(os.path.join(os.path.dirname(__file__), 'report_cases.yml')) as handle:
    CASES = yaml.safe_load(handle)
SETTINGS = {'host': 'localhost', 'patch_file': '', 'router_url': '', 'rollback_deadline': 1800}


def as_the_action_reads(case):
    """The run as the sglang_report action hands it over: the decision's keys spread out."""
    run = dict(case['run'])
    decision, state = run.pop('decision', None) or {}, run.get('state') or {}
    run.update(reasons=decision.get('reasons', []), redeploy_needed=decision.get('redeploy_needed', False),
               patch_state=decision.get('patch_state', {}), manager=state.get('service_manager'),
               check_mode=bool(run.get('check_mode')))
    return run, dict(SETTINGS, **case.get('settings', {}))


@pytest.mark.parametrize('case', CASES, ids=[case['id'] for case in CASES])
def test_report_of_each_kind_of_run(case):
    run, settings = as_the_action_reads(case)
    assert _report.report(run, settings) == case['report']


EXPECTED = {'server_info': {'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3, 'max_running_requests': 96},
            'environment': {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '24'}}
# The runs that saw the healthy server report the plan's settings: its read (nothing to change) or its start.
VERIFIED = {'no-op', 'redeployed-behind-the-router', 'redeployed-where-the-stop-saw-it-gone-at-once'}


@pytest.mark.parametrize('case', CASES, ids=[case['id'] for case in CASES])
def test_a_report_keeps_the_settings_only_where_the_run_saw_the_server_report_them(case):
    run, settings = as_the_action_reads(case)
    found = _report.report(run, dict(settings, **EXPECTED))['verified_settings']
    # Not a failed or rolled-back run, a skipped host, a check run that would redeploy, nor a rank > 0 of a group
    # (only rank 0 serves /server_info).
    assert found == (EXPECTED if case['id'] in VERIFIED else None)


def test_a_plan_without_settings_verifies_nothing():
    run, settings = as_the_action_reads(next(case for case in CASES if case['id'] == 'no-op'))
    assert _report.report(run, dict(settings, server_info={}, environment={}))['verified_settings'] is None


def test_every_report_has_the_same_keys():
    keys = set(CASES[0]['report'])
    assert all(set(case['report']) == keys for case in CASES)
    assert {'host', 'status', 'healthy', 'reason', 'phases_s', 'router', 'rollback', 'fleet_slot'} <= keys


def test_window_open_report_says_the_guard_restores_by_the_deadline():
    run, settings = as_the_action_reads(CASES[3])
    opened = _report.window_open(run, settings, '2026-12-01T12:00:00.000000+00:00', '/var/lib/gpuops-sglang/sglang')
    assert opened['status'] == 'failed' and opened['healthy'] is False
    assert opened['reason'] == (
        'the run stopped inside the outage window; unless it confirmed the new server, the guard on the host restores'
        ' the previous server 1800 s after the window opened (2026-12-01T12:00:00.000000+00:00) and writes its report'
        ' to /var/lib/gpuops-sglang/sglang/fired.json')
    assert set(opened) == set(CASES[0]['report'])


@pytest.mark.parametrize('killed, lines', [(None, []), ([{'cmdline': 'python -m x', 'signal': 'KILL'}, {}],
                                                          ['python -m x <- SIGKILL', '? <- SIG?'])])
def test_kill_lines_name_each_process_and_its_last_signal(killed, lines):
    assert _report.kill_lines(killed) == lines


def test_window_open_report_says_the_guard_restores_after_the_idle_bound_at_the_latest_by_the_deadline():
    run, settings = as_the_action_reads(CASES[3])
    opened = _report.window_open(run, dict(settings, rollback_idle=90), '2026-12-01T12:00:00.000000+00:00',
                                 '/var/lib/gpuops-sglang/sglang')
    assert opened['reason'] == (
        'the run stopped inside the outage window; unless it confirmed the new server, the guard on the host restores'
        ' the previous server 90 s after its last renewal (sglang_rollback_idle), at the latest 1800 s after the window'
        ' opened (2026-12-01T12:00:00.000000+00:00) and writes its report to /var/lib/gpuops-sglang/sglang/fired.json')


JUDGED = {'verdict': 'fail', 'reason': 'concurrency 16: output tok/s 412.0 -> 137.5 (-66.6%, tolerance 15%)',
          'baseline': 'measure', 'levels': [], 'metrics': {'before': None, 'after': None},
          'elapsed_s': {'before': 3.1, 'after': 9.0}}


@pytest.mark.parametrize('run, gate, verdict, reason', [
    ({'performance': {'failed': True, 'performance': JUDGED}, 'failure': 'x', 'window_opened': True,
      'redeploy_needed': True}, True, 'fail', JUDGED['reason']),
    ({'redeploy_needed': True, 'window_opened': True}, False, 'skipped', 'the performance gate is off (sglang_perf_gate)'),
    ({'skip_reason': 'rollout stopped: the canary gpu1 failed'}, True, 'skipped', 'the host was left alone'),
    ({'redeploy_needed': False}, True, 'skipped', 'nothing was redeployed'),
    ({'redeploy_needed': True, 'check_mode': True}, True, 'skipped', 'check mode: nothing was measured'),
    # The window's reset ({}), then a failure before the candidate's verdict.
    ({'redeploy_needed': True, 'window_opened': True, 'failure': 'Release the GPUs: busy', 'performance': {}}, True,
     'skipped', 'the run stopped before the new server was measured'),
], ids=['judged', 'gate-off', 'left-alone', 'no-op', 'check-mode', 'failed-before-the-candidate'])
def test_every_report_says_the_gates_verdict_or_why_there_is_none(run, gate, verdict, reason):
    found = _report.report(run, dict(SETTINGS, perf_gate=gate))['performance']
    assert (found['verdict'], found['reason']) == (verdict, reason)
    assert set(found) == set(JUDGED)


BAKED = {'verdict': 'fail', 'reason': 'p95 inter-token latency 0.1200 s against 0.0250 s (+380%, tolerance 25%)',
         'action': 'rolled_back', 'seconds': 25.0, 'baseline_servers': 1,
         'canary': {'requests': 90, 'errors': 0}, 'baseline': {'requests': 95, 'errors': 0}}


def test_the_bake_reaches_the_report_from_the_step_result_by_its_name():
    # From the registered verdict (failed, as a worse canary's is), through run_of as the action plugin reads it.
    run = _report.run_of({'bake': {'failed': True, 'bake': BAKED}, 'failure': 'x', 'window_opened': True}, False)
    assert _report.report(run, SETTINGS)['bake'] == BAKED
    assert _report.report(_report.run_of({}, False), SETTINGS)['bake'] is None


def node(status):
    return {'status': status}


@pytest.mark.parametrize('reports, outcome, failed', [
    ([('mn1', node('redeployed')), ('mn2', node('redeployed'))], 'redeployed', []),
    ([('mn1', node('unchanged')), ('mn2', node('unchanged')), ('mn3', node('unchanged'))], 'unchanged', []),
    ([('mn1', node('rolled_back')), ('mn2', node('rolled_back'))], 'rolled_back', ['mn1', 'mn2']),
    ([('mn1', node('rolled_back')), ('mn2', node('failed'))], 'split', ['mn1', 'mn2']),
    ([('mn1', node('redeployed')), ('mn2', node('failed'))], 'split', ['mn2']),
    ([('mn1', node('redeployed')), ('mn2', None)], 'split', ['mn2']),
    ([('mn1', node('skipped')), ('mn2', node('skipped'))], 'skipped', []),
], ids=['redeployed', 'unchanged', 'rolled-back', 'ended-differently', 'one-failed', 'one-lost', 'skipped'])
def test_a_groups_outcome_is_what_its_nodes_share_or_split(reports, outcome, failed):
    assert _report.group_outcome(reports) == {'outcome': outcome, 'failed_nodes': failed}


def test_the_group_outcome_fills_in_the_nodes_report_and_leaves_a_single_servers_alone():
    case = next(case for case in CASES if case['id'] == 'no-op-on-a-group-node')
    own = case['report']
    whole = _report.with_group_outcome(own, [('mn1', node('unchanged')), ('mn2', own)])
    assert whole['group'] == {'name': 'big', 'nnodes': 2, 'rank': 1, 'outcome': 'unchanged', 'failed_nodes': []}
    assert own['group']['outcome'] is None and set(whole) == set(own)
    single = CASES[1]['report']
    assert _report.with_group_outcome(single, []) is single


@pytest.mark.parametrize('read_by, shown', [('patch', 'patch'), ('installed', 'installed'), ('', None)])
def test_the_report_says_who_reads_the_dynamic_speculation_variable(read_by, shown):
    run, settings = as_the_action_reads(next(case for case in CASES if case['id'] == 'no-op'))
    assert _report.report(run, dict(settings, dynamic_spec_env_read_by=read_by))['dynamic_spec_env_read_by'] == shown


@pytest.mark.parametrize('patch_step, failure, outcome', [
    # A neighbour of the run that shares this sglang applied it in its own window first (issue 44).
    ({'changed': False, 'applied': True}, None, 'already applied'),
    ({'changed': True, 'applied': True}, None, 'applied now'),
    ({'changed': False, 'applied': False}, None, 'not applied'),
    ({'skipped': True, 'changed': False}, None, 'not applied'),
    ({'changed': False, 'applied': True}, 'the start failed', 'not applied'),
])
def test_a_patch_due_at_the_decision_that_the_window_found_applied_is_reported_already_applied(patch_step, failure,
                                                                                                outcome):
    run = {'patch_state': {'applied': False, 'changed': True}, 'patch': patch_step, 'failure': failure}
    assert _report.patch_outcome(run, 'files/p.diff') == outcome


@pytest.mark.parametrize('spared, lines', [
    (None, []),
    ([], []),
    ([{'pid': 5120, 'cmdline': 'python3 other_model.py', 'why': 'other GPUs'},
      {'pid': 5121, 'cmdline': 'nvidia-cuda-mps-server', 'why': 'shared devices only'}],
     ['python3 other_model.py (other GPUs)', 'nvidia-cuda-mps-server (shared devices only)']),
])
def test_spared_lines_name_each_holder_a_scoped_release_left_alone_and_why(spared, lines):
    assert _report.spared_lines(spared) == lines
