"""The REDEPLOY SUMMARY line of a host: status, health, downtime, the performance gate's verdict, the reason; the
SPECULATION TUNING block of each tuned host."""
import pytest

from ansible_collections.gpuops.sglang.plugins.callback.concise import report_line, tuning_lines

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
