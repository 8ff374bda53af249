"""The REDEPLOY SUMMARY line of a host: status, health, downtime, the performance gate's verdict, the reason; the
SPECULATION TUNING block of each tuned host."""
import pytest

from ansible_collections.gpuops.sglang.plugins.callback.concise import dry_run_lines, report_line, tuning_lines

GATE_FAILED = ('Judge the new server against the baseline (a slower one is rolled back): the new server serves slower'
               ' than the old one: concurrency 16: output tok/s 412.0 -> 137.5 (-66.6%, tolerance 15%)')


@pytest.mark.parametrize('report, line', [
    ({'status': 'redeployed', 'healthy': True, 'downtime_s': 3.05, 'reason': 'force_restart',
      'performance': {'verdict': 'skipped'}},
     'gpu1: redeployed, healthy, downtime 3.05 s: force_restart'),
    ({'status': 'redeployed', 'healthy': True, 'downtime_s': 3.05, 'reason': 'force_restart',
      'performance': {'verdict': 'pass'}},
     'gpu1: redeployed, healthy, downtime 3.05 s, performance gate passed: force_restart'),
    ({'status': 'rolled_back', 'healthy': True, 'downtime_s': 9.5, 'reason': GATE_FAILED,
      'performance': {'verdict': 'fail'}},
     'gpu1: rolled_back, healthy, downtime 9.5 s, performance gate FAILED: ' + GATE_FAILED),
    # A report from before the gate has no performance block.
    ({'status': 'unchanged', 'healthy': True, 'downtime_s': 0, 'reason': 'nothing to change'},
     'gpu1: unchanged, healthy: nothing to change'),
])
def test_the_summary_line_names_a_judged_performance_gate(report, line):
    assert report_line('gpu1', report) == line


@pytest.mark.parametrize('tables, lines', [
    ({'gpu2': ['concurrency plain eagle3', '1 90.0 140.0*', 'threshold: 4'], 'gpu1': ['threshold: none']},
     ['gpu1:', '  threshold: none', 'gpu2:', '  concurrency plain eagle3', '  1 90.0 140.0*', '  threshold: 4']),
    (None, []),
    ({'gpu2': 'not a table'}, []),
    (['not', 'by', 'host'], []),
])
def test_each_tuned_hosts_table_is_its_name_then_its_lines(tables, lines):
    assert tuning_lines(tables) == lines


DRY_RUN = {'would_kill': {'stop': [{'pid': 7, 'user': 'root', 'cmdline': 'python3 -m sglang.launch_server', 'gpus': []}],
                          'kill': [], 'gpu_release': []},
           'flag_changes': [{'flag': '--max-running-requests', 'live': '64', 'wanted': '96'}],
           'deadline': {'deadline_s': 900, 'idle_s': 90}}


# A check run's dry run goes under its host's summary line; a real run's report (null keys) adds nothing.
@pytest.mark.parametrize('report, lines', [
    (DRY_RUN, ['  would end (stop): PID 7, user root: python3 -m sglang.launch_server',
               '  would end (kill): nothing', '  would end (gpu_release): nothing',
               '  flag --max-running-requests: 64 -> 96',
               '  guard: rolls back 900 s after the window opens at the latest, or 90 s after its last renewal']),
    ({'would_kill': None, 'flag_changes': None, 'deadline': None}, []),
    ({}, []),
], ids=['check-run', 'real-run', 'older-report'])
def test_a_check_runs_summary_lists_what_the_window_would_end_and_change(report, lines):
    assert dry_run_lines(report) == lines
