"""sglang_performance: the verdict on the controller, failing a slower server, with the baseline measured or stored."""
import json

import pytest

from ansible_collections.gpuops.sglang.plugins.action.sglang_performance import ActionModule
from ansible_collections.gpuops.sglang.plugins.action.sglang_report import write_report


def bench(tok_s, itl, errors=0):
    levels = [{'concurrency': concurrency, 'requests': 16, 'completed': 16 - errors, 'errors': errors,
               'output_tokens': 1024, 'wall_s': 2.0, 'output_tok_s': tok_s * concurrency, 'ttft_p50_s': 0.02,
               'ttft_p95_s': 0.04, 'itl_p50_s': itl / 2, 'itl_p95_s': itl, 'timed_out': False} for concurrency in (1, 16)]
    return {'measured': True, 'levels': levels, 'metrics': None, 'elapsed_s': 4.0, 'changed': False}


ARGS = {'levels': [1, 16], 'throughput_tolerance': 0.15, 'itl_tolerance': 0.25}


def test_an_unchanged_server_passes(run_action):
    result = run_action(ActionModule, {}, args=dict(ARGS, before=bench(40.0, 0.03), after=bench(39.0, 0.031)))
    assert not result.get('failed') and result['verdict'] == 'pass'
    assert [row['after']['output_tok_s'] for row in result['performance']['levels']] == [39.0, 624.0]


def test_a_slower_server_fails_the_task_with_the_regressed_levels(run_action):
    result = run_action(ActionModule, {}, args=dict(ARGS, before=bench(40.0, 0.03), after=bench(13.0, 0.03)))
    assert result['failed'] and result['verdict'] == 'fail'
    assert result['msg'] == (
        'the new server serves slower than the old one: concurrency 1: output tok/s 40.0 -> 13.0 (-67.5%,'
        ' tolerance 15%); concurrency 16: output tok/s 640.0 -> 208.0 (-67.5%, tolerance 15%)')
    assert result['performance']['verdict'] == 'fail'


@pytest.mark.parametrize('before, reason', [
    ({'skipped': True, 'changed': False},
     'concurrency 1: the old server was not measured (it did not serve before the stop)'),
    ({'failed': True, 'msg': 'benchmarking the server at http://127.0.0.1:30000 failed: boom', 'measured': False},
     'concurrency 1: the old server could not be measured (benchmarking the server at http://127.0.0.1:30000 failed:'
     ' boom)'),
])
def test_no_baseline_skips_the_verdict_and_says_why(run_action, before, reason):
    result = run_action(ActionModule, {}, args=dict(ARGS, before=before, after=bench(13.0, 0.03)))
    assert not result.get('failed') and result['verdict'] == 'skipped'
    assert result['performance']['reason'].startswith('nothing to compare with: ' + reason)


def test_a_stored_baseline_is_the_last_redeploy_reports_after_figures(run_action, tmp_path):
    first = run_action(ActionModule, {}, args=dict(ARGS, before=bench(40.0, 0.03), after=bench(41.0, 0.03)))
    write_report(str(tmp_path), 'gpu1', {'status': 'redeployed', 'performance': first['performance']})
    args = dict(ARGS, baseline='stored', report_dir=str(tmp_path), host='gpu1', after=bench(20.0, 0.03))
    result = run_action(ActionModule, {}, args=args)
    assert result['failed'] and 'concurrency 1: output tok/s 41.0 -> 20.0' in result['msg']
    assert result['performance']['baseline'] == 'stored'
    # Another host has no report: nothing to compare with, and the reason names the host.
    result = run_action(ActionModule, {}, args=dict(args, host='gpu2'))
    assert result['verdict'] == 'skipped'
    assert 'no stored figures in the last redeploy report of gpu2' in result['performance']['reason']
    assert json.loads((tmp_path / 'gpu1.last-redeploy.json').read_text())['performance']['verdict'] == 'pass'
