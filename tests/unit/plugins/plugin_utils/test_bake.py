"""The bake's verdict on recorded live figures: pass, fail (which figure, by how much), inconclusive (why)."""
import math
import random
import re

import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _bake

ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200,
       0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0, '+Inf']
SECONDS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, '+Inf']


def histogram(bounds, samples):
    counts = [0] * len(bounds)
    for value in samples:
        counts[next(i for i, bound in enumerate(bounds) if bound == '+Inf' or value <= bound)] += 1
    return {'bounds': bounds, 'counts': counts, 'sum': sum(samples)}


def side(requests, itl, ttft=0.15, e2e=0.9, aborted=0, seed=1):
    """A server's figures over a bake: `requests` answered, 16 inter-token samples each around `itl` s."""
    rng = random.Random(seed)
    return {'requests': requests, 'aborted': aborted, 'tokens': requests * 16,
            'itl': histogram(ITL, [rng.gauss(itl, itl / 8) for dummy in range(requests * 16)]),
            'ttft': histogram(SECONDS, [rng.gauss(ttft, ttft / 8) for dummy in range(requests)]),
            'e2e': histogram(SECONDS, [rng.gauss(e2e, e2e / 8) for dummy in range(requests)])}


@pytest.mark.parametrize('canary, baselines, outcome, reason', [
    (side(60, 0.03), [side(60, 0.03, seed=2)], 'pass', 'within the tolerances over 60 canary and 60 baseline requests'),
    # Two baseline servers are one baseline.
    (side(60, 0.03), [side(30, 0.03, seed=2), side(30, 0.03, seed=3)], 'pass', 'within the tolerances over 60 canary and 60 baseline'),
    (side(60, 0.15), [side(60, 0.03, seed=2)], 'fail', 'p95 inter-token latency'),
    (side(60, 0.03, e2e=4.5), [side(60, 0.03, seed=2)], 'fail', 'p95 end-to-end latency'),
    (side(60, 0.03, ttft=0.9), [side(60, 0.03, seed=2)], 'fail', 'p95 time to first token'),
    (side(54, 0.03, aborted=6), [side(60, 0.03, seed=2)], 'fail', 'errors 10.0% of 60 requests against 0.0% of 60'),
    (side(10, 0.03), [side(60, 0.03, seed=2)], 'inconclusive', 'the canary served 10 requests, fewer than 20'),
    (side(60, 0.03), [side(5, 0.03, seed=2)], 'inconclusive', 'the baseline served 5 requests, fewer than 20'),
    (side(60, 0.03), [], 'inconclusive', 'no server on the previous version exports live figures in the router'),
    (side(60, 0.03), [None], 'inconclusive', 'no server on the previous version'),
    (None, [side(60, 0.03)], 'inconclusive', 'the canary exports no live figures'),
    # Errors fail a canary on their own, with no baseline.
    (side(40, 0.03, aborted=10), [], 'fail', 'errors 20.0% of 50 requests (tolerance 2%, no baseline'),
    # Slower, but too few requests to say so: inconclusive, never a pass.
    (side(12, 0.15), [side(60, 0.03, seed=2)], 'inconclusive', 'the canary served 12 requests'),
], ids=['same', 'two-baselines', 'itl-5x', 'e2e-5x', 'ttft-6x', 'errors-10pc', 'few-canary', 'few-baseline',
        'no-baseline', 'baseline-without-metrics', 'canary-without-metrics', 'errors-without-baseline',
        'slower-but-few'])
def test_the_verdict(canary, baselines, outcome, reason):
    found = _bake.verdict(canary, baselines)
    assert found['verdict'] == outcome, found['reason']
    assert reason in found['reason']


def test_the_report_carries_both_sides_figures():
    found = _bake.verdict(side(60, 0.15), [side(60, 0.03, seed=2)])
    assert set(found['canary']) == {'requests', 'errors', 'error_rate', 'ttft_p95_s', 'itl_p95_s', 'e2e_p95_s',
                                    'ttft_mean_s', 'itl_mean_s', 'e2e_mean_s'}
    assert found['canary']['requests'] == 60 and found['baseline']['requests'] == 60
    assert found['canary']['itl_p95_s'] > 4 * found['baseline']['itl_p95_s']
    # The exact means: the samples' own averages, whatever the buckets.
    assert found['canary']['itl_mean_s'] == pytest.approx(0.15, rel=0.02)
    assert found['baseline']['itl_mean_s'] == pytest.approx(0.03, rel=0.02)
    assert found['baseline_servers'] == 1


def test_a_latency_failure_says_how_far_the_exact_means_moved():
    found = _bake.verdict(side(60, 0.03, e2e=4.5), [side(60, 0.03, seed=2)])
    assert found['verdict'] == 'fail'
    # 4.5 s against 0.9 s on average: five times, +400% (the seeds' noise moves it by a few points).
    assert re.search(r'mean 4\.[45]\d+ s against 0\.(89|90|91)\d* s, \+(39\d|40\d|41\d)%', found['reason']), found['reason']


@pytest.mark.parametrize('sums, mean', [
    ((1.0, 3.0), 0.2),  # 20 samples, 4.0 s in all
    ((1.0, None), None),  # one server without its sum: no exact mean of both
])
def test_baseline_servers_merge_their_sums(sums, mean):
    servers = [{'requests': 10, 'itl': {'bounds': ITL, 'counts': [0] * 14 + [10] + [0] * 9, 'sum': total}}
               for total in sums]
    merged = _bake.merged(servers)
    assert merged['itl']['counts'][14] == 20
    assert _bake.mean(merged['itl']) == (pytest.approx(mean) if mean is not None else None)


def test_a_histogram_without_a_sum_has_no_mean_and_says_none():
    figures = _bake.summary({'requests': 10, 'itl': {'bounds': ITL, 'counts': [0] * 14 + [10] + [0] * 9}})
    assert figures['itl_mean_s'] is None and figures['itl_p95_s'] is not None


def test_a_p95_beyond_the_tolerance_that_the_rank_test_calls_chance_passes():
    # Both sides from one distribution whose p95 sits right at a bucket edge: the canary's few slow samples move
    # its interpolated p95 past 25%, but its samples as a whole are not larger.
    base = {'requests': 100, 'aborted': 0, 'itl': {'bounds': ITL, 'counts': [0] * 10 + [95, 5] + [0] * 12}}
    canary = {'requests': 100, 'aborted': 0, 'itl': {'bounds': ITL, 'counts': [0] * 9 + [5, 85, 0, 10] + [0] * 11}}
    assert _bake.quantile(canary['itl'], 0.95) > 1.25 * _bake.quantile(base['itl'], 0.95)
    assert _bake.rank_test(canary['itl'], base['itl']) >= 0.01
    assert _bake.verdict(canary, [base])['verdict'] == 'pass'


@pytest.mark.parametrize('counts, fraction, expected', [
    ([0, 10, 0], 0.5, 0.15),          # halfway through the (0.1, 0.2] bucket
    ([10, 0, 0], 0.95, 0.095),        # the first bucket starts at 0
    ([0, 0, 10], 0.95, 0.2),          # the +Inf bucket: the highest finite bound
    ([0, 0, 0], 0.95, None),
])
def test_quantile_as_prometheus(counts, fraction, expected):
    value = _bake.quantile({'bounds': [0.1, 0.2, '+Inf'], 'counts': counts}, fraction)
    assert value == expected if expected is None else math.isclose(value, expected)


@pytest.mark.parametrize('canary, baseline, low', [
    ([0, 0, 50, 50], [50, 50, 0, 0], False),   # every canary sample above every baseline one: p near 0
    ([50, 50, 0, 0], [0, 0, 50, 50], True),    # every canary sample below: p near 1
    ([25, 25, 25, 25], [25, 25, 25, 25], True),  # the same: p = 0.5
])
def test_the_rank_test_is_one_sided(canary, baseline, low):
    bounds = [0.1, 0.2, 0.4, '+Inf']
    p_value = _bake.rank_test({'bounds': bounds, 'counts': canary}, {'bounds': bounds, 'counts': baseline})
    assert (p_value >= 0.5) is low
    assert p_value < 1e-6 or p_value >= 0.5


def test_the_rank_test_needs_samples_on_both_sides():
    bounds = [0.1, '+Inf']
    assert _bake.rank_test({'bounds': bounds, 'counts': [7, 0]}, {'bounds': bounds, 'counts': [50, 50]}) is None
    assert _bake.rank_test({'bounds': bounds, 'counts': [0, 50]}, {'bounds': bounds, 'counts': [0, 50]}) is None


def test_settings_move_the_bounds():
    canary, baseline = side(60, 0.045), [side(60, 0.03, seed=2)]
    assert _bake.verdict(canary, baseline)['verdict'] == 'fail'
    assert _bake.verdict(canary, baseline, {'latency_tolerance': 1.0})['verdict'] == 'pass'
    assert _bake.verdict(side(15, 0.03), baseline, {'min_requests': 10})['verdict'] == 'pass'


def without(figures, *keys):
    """A side's figures with the histograms `keys` gone (not exported), or all three."""
    return dict(figures, **{key: None for key in keys or ('ttft', 'itl', 'e2e')})


def emptied(figures, *keys):
    """A side's figures with the histograms `keys` exported but holding no sample (a NaN bucket read as 0 did)."""
    return dict(figures, **{key: dict(figures[key], counts=[0] * len(figures[key]['counts']), sum=0.0)
                            for key in keys or ('ttft', 'itl', 'e2e')})


@pytest.mark.parametrize('canary, baseline, outcome, reason', [
    # The canary: 100 requests, its buckets read as no sample; every latency check skipped, then "pass".
    (emptied(side(100, 0.15)), side(60, 0.03, seed=2), 'inconclusive',
     'the canary served 100 requests but has no latency samples (its histograms are empty or not exported)'),
    (without(side(100, 0.15)), side(60, 0.03, seed=2), 'inconclusive', 'the canary served 100 requests but has no'),
    (side(60, 0.03), without(side(60, 0.03, seed=2)), 'inconclusive', 'the baseline served 60 requests but has no'),
    (side(60, 0.03), emptied(side(60, 0.03, seed=2), 'ttft'), 'inconclusive',
     'time to first token has samples on one side only (the canary 60, the baseline 0)'),
    (without(side(60, 0.03), 'e2e'), side(60, 0.03, seed=2), 'inconclusive',
     'end-to-end latency has samples on one side only (the canary 0, the baseline 60)'),
    # Non-streamed traffic: SGLang records no inter-token latency on either side, the other checks still run.
    (without(side(60, 0.03), 'itl'), without(side(60, 0.03, seed=2), 'itl'), 'pass', 'within the tolerances'),
    (without(side(60, 0.03, e2e=4.5), 'itl'), without(side(60, 0.03, seed=2), 'itl'), 'fail', 'p95 end-to-end'),
    # A failed check still fails: the gap only keeps a bake from passing.
    (without(side(54, 0.03, aborted=6), 'ttft'), side(60, 0.03, seed=2), 'fail', 'errors 10.0% of 60 requests'),
    # Too few requests says so, not the samples.
    (without(side(10, 0.03)), side(60, 0.03, seed=2), 'inconclusive', 'the canary served 10 requests, fewer than 20'),
], ids=['canary-nan-buckets', 'canary-no-histograms', 'baseline-no-histograms', 'ttft-baseline-only',
        'e2e-canary-none', 'non-streamed-pass', 'non-streamed-fail', 'errors-still-fail', 'few-requests'])
def test_a_latency_check_that_cannot_run_is_never_a_pass(canary, baseline, outcome, reason):
    found = _bake.verdict(canary, [baseline])
    assert found['verdict'] == outcome, found['reason']
    assert reason in found['reason'], found['reason']


NOT_JUDGED = 'the figures cannot be judged, a figure is not a finite number: '


def with_itl(figures, counts, total=0.5):
    return dict(figures, itl={'bounds': figures['itl']['bounds'], 'counts': counts, 'sum': total})


@pytest.mark.parametrize('canary, baselines, named', [
    # What the reader's difference gave for two ranks exporting 1e308 each (inf - inf), from a module of before.
    (dict(side(60, 0.03), requests=math.nan), [side(60, 0.03, seed=2)], "the canary's requests reads nan"),
    (dict(side(60, 0.03), aborted='NaN'), [side(60, 0.03, seed=2)], "the canary's aborted reads NaN"),
    (side(60, 0.03), [side(60, 0.03, seed=2), dict(side(60, 0.03, seed=3), requests=math.inf)],
     "baseline server 2's requests reads inf"),
    (with_itl(side(60, 0.03), [math.nan] * 24), [side(60, 0.03, seed=2)],
     "the canary's inter-token latency histogram holds nan"),
    (with_itl(side(60, 0.03), [1.0] * 24, math.inf), [side(60, 0.03, seed=2)],
     "the canary's inter-token latency histogram holds inf"),
    # Each finite, their sum not: requests and errors together, two baseline servers, a histogram's samples.
    (dict(side(60, 0.03), requests=1e308, aborted=1e308), [side(60, 0.03, seed=2)],
     "the canary's requests and aborted add up past a float's range"),
    (side(60, 0.03), [dict(side(60, 0.03, seed=2), requests=1e308), dict(side(60, 0.03, seed=3), requests=1e308)],
     "the baseline servers' merged requests reads inf"),
    (with_itl(side(60, 0.03), [1e308] * 24), [side(60, 0.03, seed=2)],
     "the canary's inter-token latency histogram holds counts that add up past a float's range"),
], ids=['nan-requests', 'nan-string-aborted', 'inf-baseline', 'nan-buckets', 'inf-sum', 'requests-and-errors-overflow',
        'two-baselines-overflow', 'buckets-overflow'])
def test_figures_that_are_not_finite_make_the_verdict_inconclusive_naming_them_not_a_traceback(canary, baselines,
                                                                                              named):
    found = _bake.verdict(canary, baselines)
    assert found['verdict'] == 'inconclusive', found
    assert found['reason'].startswith(NOT_JUDGED) and named in found['reason'], found['reason']
    assert (found['canary'], found['baseline']) == (None, None)
    assert set(found) == {'verdict', 'reason', 'canary', 'baseline', 'baseline_servers'}


def test_counts_whose_powers_leave_a_floats_range_leave_the_ratio_alone_to_decide():
    # The rank test's tie term cubes the counts: 1e200 ** 3 raises OverflowError, no p-value can be had.
    slow = {'bounds': [0.01, 0.02, '+Inf'], 'counts': [0, 1e200, 0]}
    fast = {'bounds': [0.01, 0.02, '+Inf'], 'counts': [1e200, 0, 0]}
    assert _bake.rank_test(slow, fast) is None
    found = _bake.verdict({'requests': 1e200, 'aborted': 0, 'itl': slow}, [{'requests': 1e200, 'aborted': 0, 'itl': fast}])
    assert found['verdict'] == 'fail' and found['reason'].startswith('p95 inter-token latency'), found['reason']
