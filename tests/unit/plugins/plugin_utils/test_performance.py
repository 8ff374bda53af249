"""The performance gate's verdict on recorded benchmark samples: pass, fail (which level, by how much), skipped."""
import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _performance


def level(concurrency, tok_s, itl_p95, errors=0, timed_out=False, requests=8, ttft_p95=0.05):
    completed = requests - errors if not timed_out else requests // 2
    return {'concurrency': concurrency, 'requests': requests, 'completed': completed, 'errors': errors,
            'output_tokens': int(tok_s * 2), 'wall_s': 2.0, 'output_tok_s': tok_s, 'ttft_p50_s': ttft_p95 / 2,
            'ttft_p95_s': ttft_p95, 'itl_p50_s': itl_p95 and itl_p95 / 2, 'itl_p95_s': itl_p95,
            'timed_out': timed_out}


def bench(*levels, metrics=None):
    return {'levels': list(levels), 'metrics': metrics, 'elapsed_s': 4.2}


# Recorded on the lab's stand-in (EAGLE-3, threshold 8): an unchanged server, and one with LAB_STANDIN_SLOWDOWN=3.
OLD = bench(level(1, 41.3, 0.0262), level(16, 412.0, 0.0401), metrics={'gen_throughput': 405.0,
                                                                         'spec_accept_length': 2.6})
SAME = bench(level(1, 40.1, 0.0270), level(16, 398.6, 0.0415), metrics={'gen_throughput': 399.0,
                                                                          'spec_accept_length': 2.6})
SLOWER = bench(level(1, 13.9, 0.0790), level(16, 137.5, 0.1203))


@pytest.mark.parametrize('before, after, verdict, reason', [
    (OLD, SAME, 'pass', 'within the tolerances (output tok/s -15%, p95 inter-token latency +25%) at concurrency 1, 16'),
    (OLD, SLOWER, 'fail',
     'concurrency 1: output tok/s 41.3 -> 13.9 (-66.3%, tolerance 15%); concurrency 1: p95 inter-token latency'
     ' 0.0262 s -> 0.0790 s (+201.5%, tolerance 25%); concurrency 16: output tok/s 412.0 -> 137.5 (-66.6%,'
     ' tolerance 15%); concurrency 16: p95 inter-token latency 0.0401 s -> 0.1203 s (+200.0%, tolerance 25%)'),
    # Only the latency regressed, at one level.
    (OLD, bench(level(1, 41.0, 0.0262), level(16, 400.0, 0.0600)), 'fail',
     'concurrency 16: p95 inter-token latency 0.0401 s -> 0.0600 s (+49.6%, tolerance 25%)'),
    # Faster is never a regression.
    (OLD, bench(level(1, 80.0, 0.010), level(16, 800.0, 0.020)), 'pass',
     'within the tolerances (output tok/s -15%, p95 inter-token latency +25%) at concurrency 1, 16'),
    # Errors fail the candidate however fast it was.
    (OLD, bench(level(1, 41.3, 0.0262), level(16, 420.0, 0.0401, errors=2)), 'fail',
     'concurrency 16: 2 of 8 requests failed on the new server'),
    (OLD, bench(level(1, 41.3, 0.0262), level(16, 100.0, 0.5, timed_out=True)), 'fail',
     'concurrency 16: the new server did not finish in time (4 of 8 requests completed)'),
    (OLD, bench(level(1, 41.3, 0.0262)), 'fail', 'concurrency 16: not measured on the new server'),
    # Nothing to compare with: the candidate served cleanly, the gate cannot judge it.
    (None, SAME, 'skipped', 'nothing to compare with: concurrency 1: no baseline; concurrency 16: no baseline'),
    # A level the baseline cannot speak for is said, the others still judged.
    (bench(level(1, 41.3, 0.0262), level(16, 50.0, 0.9, timed_out=True)), SAME, 'pass',
     'within the tolerances (output tok/s -15%, p95 inter-token latency +25%) at concurrency 1, 16;'
     ' concurrency 16: the baseline did not finish in time, not compared'),
    (bench(level(1, 41.3, 0.0262)), SLOWER, 'fail',
     'concurrency 1: output tok/s 41.3 -> 13.9 (-66.3%, tolerance 15%); concurrency 1: p95 inter-token latency'
     ' 0.0262 s -> 0.0790 s (+201.5%, tolerance 25%); concurrency 16: no baseline'),
    # One-token outputs have no inter-token latency: throughput alone decides.
    (bench(level(1, 41.3, None), level(16, 412.0, None)), bench(level(1, 40.0, None), level(16, 400.0, None)),
     'pass', 'within the tolerances (output tok/s -15%, p95 inter-token latency +25%) at concurrency 1, 16'),
])
def test_the_verdict_names_the_regressed_level_and_by_how_much(before, after, verdict, reason):
    found = _performance.verdict([1, 16], before, after, 0.15, 0.25)
    assert (found['verdict'], found['reason']) == (verdict, reason)


def test_the_levels_carry_both_tables_and_the_servers_own_metrics():
    found = _performance.verdict([1, 16], OLD, SAME, 0.15, 0.25, baseline='measure')
    assert found['levels'][1] == {
        'concurrency': 16,
        'before': {'output_tok_s': 412.0, 'ttft_p95_s': 0.05, 'itl_p95_s': 0.0401, 'errors': 0},
        'after': {'output_tok_s': 398.6, 'ttft_p95_s': 0.05, 'itl_p95_s': 0.0415, 'errors': 0}}
    assert found['metrics'] == {'before': OLD['metrics'], 'after': SAME['metrics']}
    assert found['baseline'] == 'measure'
    assert found['elapsed_s'] == {'before': 4.2, 'after': 4.2}


def test_a_server_without_metrics_is_judged_from_outside_alone():
    found = _performance.verdict([1, 16], SLOWER, SLOWER, 0.15, 0.25)
    assert found['verdict'] == 'pass'
    assert found['metrics'] == {'before': None, 'after': None}


@pytest.mark.parametrize('tolerance, verdict', [(0.66, 'fail'), (0.67, 'pass')])
def test_the_throughput_tolerance_is_a_fraction_of_the_baseline(tolerance, verdict):
    assert _performance.verdict([16], OLD, bench(level(16, 137.5, 0.0401)), tolerance, 0.25)['verdict'] == verdict


def test_every_block_has_the_same_keys_judged_or_not():
    judged = _performance.verdict([1, 16], OLD, SAME, 0.15, 0.25)
    for block in (_performance.unjudged(False, 'x'), _performance.unjudged(True, 'nothing was redeployed')):
        assert sorted(block) == sorted(judged)
        assert block['verdict'] == 'skipped' and block['levels'] == []
    assert _performance.unjudged(False, 'x')['reason'] == 'the performance gate is off (sglang_perf_gate)'
    assert _performance.unjudged(True, 'nothing was redeployed')['reason'] == 'nothing was redeployed'


@pytest.mark.parametrize('configured, threshold, levels', [
    ([], 8, [1, 16]), ([], 1, [1, 2]), (None, 0, [1, 2]), ([16, 1, '4', 16], 8, [1, 4, 16])])
def test_the_default_levels_are_1_and_twice_the_speculation_threshold(configured, threshold, levels):
    assert _performance.levels_to_measure(configured, threshold) == levels


def test_a_stored_baseline_is_the_last_reports_after_figures():
    last = {'performance': _performance.verdict([1, 16], OLD, SAME, 0.15, 0.25)}
    stored = _performance.stored_baseline(last)
    assert [entry['output_tok_s'] for entry in stored['levels']] == [40.1, 398.6]
    assert stored['metrics'] == SAME['metrics']
    judged = _performance.verdict([1, 16], stored, SLOWER, 0.15, 0.25, baseline='stored')
    assert judged['verdict'] == 'fail' and judged['reason'].startswith('concurrency 1: output tok/s 40.1 -> 13.9')


@pytest.mark.parametrize('report', [None, {}, {'performance': None},
                                    {'performance': _performance.unjudged(False, '')}])
def test_no_stored_baseline_without_figures(report):
    assert _performance.stored_baseline(report) is None
