# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The canary's bake: its live figures against the baseline's (the servers still on the previous version, in the
same router, over the same window), as automated canary analysis does it (Kayenta: the canary against a baseline
of the same window, a rank test per metric with an effect-size tolerance, a minimum of samples).

Inputs are what module_utils/domain/_live_metrics.difference gives for each side: counters ``requests``, ``aborted``,
``tokens`` and histograms ``ttft``, ``itl``, ``e2e`` (``{'bounds', 'counts', 'sum'}``, +Inf last, as a number or
the string "+Inf"; ``sum`` may be None). Several baseline servers are merged (their counts and sums added) before
the comparison.

Per check:
- errors: the canary's error rate (aborted / (answered + aborted)) may exceed the baseline's by at most
  ``error_tolerance`` (an absolute share);
- time to first token, inter-token latency, end-to-end latency: the canary's p95 (Prometheus' histogram_quantile:
  linear within the bucket) may exceed the baseline's by at most ``latency_tolerance`` (a fraction). Beyond it,
  where both sides have at least RANK_TEST_MIN samples, a one-sided Mann-Whitney U test over the buckets (ties
  within a bucket) must also find the canary slower at ``alpha``: a p95 that moved by chance is not a regression.
  Where the samples do not allow the test, the ratio alone decides. The exact means (``_sum`` / samples) are
  reported beside the p95s and in a failure's reason: a p95 interpolated within coarse buckets can overstate a
  small shift near a bucket's edge (docs/canary-bake.md, measured), the mean says how large the shift really is.
  They do not decide: a slower tail (a few requests much slower) moves the p95, hardly the mean.

Verdict: ``fail`` when a check fails; else ``inconclusive`` when either side served fewer than ``min_requests``
(or the canary exports no figures, or there is no baseline), or when the latencies cannot be compared though both
sides served enough: a side without a single latency sample, or a latency with samples on one side only (a check
that cannot run is never a pass); else ``pass``. A figure that is not a finite number (NaN, an infinity, or counts
that add up past a float's range) makes the verdict ``inconclusive``, naming it: it would turn a check off (NaN compares
false with every bound) or stop the verdict short (int(NaN)). Pure functions; test_bake.py.
"""

from __future__ import annotations

import math
from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_float, as_int

LATENCIES = (('ttft', 'time to first token'), ('itl', 'inter-token latency'), ('e2e', 'end-to-end latency'))
# Below this many samples on a side, the rank test's normal approximation is not worth its p-value.
RANK_TEST_MIN = 8
DEFAULTS = {'min_requests': 20, 'latency_tolerance': 0.25, 'error_tolerance': 0.02, 'alpha': 0.01}


def _bound(value: float | str) -> float:
    return math.inf if value in ('+Inf', 'Inf', math.inf) else float(value)


def _counts(histogram: Any) -> list[Any]:
    return [float(count) for count in histogram['counts']] if histogram else []


def merged(sides: list[Any]) -> Any:
    """One side's figures from several servers': counters and bucket counts summed. Histograms of other
    buckets than the first server's are left out (each release exports the same buckets)."""
    sides = [side for side in sides if side]
    if not sides:
        return None
    total = {}
    for key in ('requests', 'aborted', 'tokens'):
        values = [side.get(key) for side in sides if side.get(key) is not None]
        total[key] = sum(values) if values else None
    for key, dummy in LATENCIES:
        histograms = [side.get(key) for side in sides if side.get(key)]
        if not histograms:
            total[key] = None
            continue
        bounds = [_bound(bound) for bound in histograms[0]['bounds']]
        counts = [0.0] * len(bounds)
        same = [histogram for histogram in histograms if [_bound(bound) for bound in histogram['bounds']] == bounds]
        for histogram in same:
            counts = [a + b for a, b in zip(counts, _counts(histogram))]
        sums = [histogram.get('sum') for histogram in same]
        total[key] = {'bounds': bounds, 'counts': counts,
                      'sum': None if None in sums else sum(float(value) for value in sums)}
    return total


def mean(histogram: Any) -> float | None:
    """The exact mean of a histogram's samples (its sum over its count); None without samples or a sum."""
    if not histogram or histogram.get('sum') is None:
        return None
    samples = sum(_counts(histogram))
    return float(histogram['sum']) / samples if samples > 0 else None


def quantile(histogram: Any, fraction: float) -> float | None:
    """The fraction quantile as Prometheus' histogram_quantile computes it (linear within the bucket, the
    highest finite bound for the +Inf bucket); None without samples."""
    if not histogram:
        return None
    bounds, counts = [_bound(bound) for bound in histogram['bounds']], _counts(histogram)
    total = sum(counts)
    if total <= 0:
        return None
    rank, below, lower = fraction * total, 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count > 0 and below + count >= rank:
            if bound == math.inf:
                return lower
            return lower + (bound - lower) * (rank - below) / count
        below += count
        if bound != math.inf:
            lower = bound
    return lower


def rank_test(canary: dict[str, Any], baseline: dict[str, Any]) -> float | None:
    """One-sided Mann-Whitney U over bucket counts (every sample of a bucket tied): the p-value of "the
    canary's samples are larger", by the normal approximation with the tie correction. None when a side has
    fewer than RANK_TEST_MIN samples or every sample falls in one bucket."""
    a, b = _counts(canary), _counts(baseline)
    n1, n2 = sum(a), sum(b)
    if n1 < RANK_TEST_MIN or n2 < RANK_TEST_MIN or len(a) != len(b):
        return None
    u, below = 0.0, 0.0
    for mine, theirs in zip(a, b):
        # Each canary sample beats every baseline sample of a lower bucket, and ties half of its own.
        u += mine * (below + theirs / 2.0)
        below += theirs
    total = n1 + n2
    try:
        ties = sum((x + y) ** 3 - (x + y) for x, y in zip(a, b))
        variance = n1 * n2 / 12.0 * ((total + 1) - ties / (total * (total - 1)))
        z = (u - n1 * n2 / 2.0) / math.sqrt(variance) if variance > 0 else math.nan
    except OverflowError:
        z = math.nan
    if not math.isfinite(z):
        # One bucket alone, or counts so large that their powers leave a float's range (** raises, * gives inf):
        # no p-value, the ratio alone decides.
        return None
    return 0.5 * math.erfc(z / math.sqrt(2))


def _samples(histogram: Any) -> float:
    return sum(_counts(histogram))


def _latency_gaps(canary: dict[str, Any], baseline: dict[str, Any], mine: dict[str, Any],
                  theirs: dict[str, Any]) -> list[Any]:
    """Why the latencies cannot be compared though both sides served enough requests: a side without any latency
    sample (its histograms empty or not exported), or a latency measured on one side only. A latency neither side
    has is no gap: a server answers non-streamed requests in one piece, and SGLang then records no inter-token
    latency on either side."""
    empty = ['%s served %d requests but has no latency samples (its histograms are empty or not exported)'
             % (label, figures['requests'])
             for label, side, figures in (('the canary', canary, mine), ('the baseline', baseline, theirs))
             if not any(_samples(side.get(key)) for key, dummy in LATENCIES)]
    if empty:
        return empty
    return ['%s has samples on one side only (the canary %d, the baseline %d)' % (
        title, _samples(canary.get(key)), _samples(baseline.get(key)))
        for key, title in LATENCIES if (_samples(canary.get(key)) > 0) != (_samples(baseline.get(key)) > 0)]


def _number(value: float | str) -> float:
    """value as a float; NaN for what is no number at all (it is refused as NaN is)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def not_finite(label: str, side: Any) -> list[Any]:
    """What of a side's figures is not a finite number, in words ([] when all are): each counter, requests and
    errors together, each histogram's counts, their total and its sum."""
    if not side:
        return []
    found = []
    for key in ('requests', 'aborted', 'tokens'):
        if side.get(key) is not None and not math.isfinite(_number(side[key])):
            found.append('%s %s reads %s' % (label, key, side[key]))
    if not found and not math.isfinite(_number(side.get('requests') or 0) + _number(side.get('aborted') or 0)):
        found.append('%s requests and aborted add up past a float\'s range' % label)
    for key, title in LATENCIES:
        histogram = side.get(key)
        if not histogram:
            continue
        counts = [_number(count) for count in histogram.get('counts') or []]
        values = counts + ([_number(histogram['sum'])] if histogram.get('sum') is not None else [])
        if not all(math.isfinite(value) for value in values) or not math.isfinite(sum(counts)):
            bad = ', '.join(str(value) for value in values if not math.isfinite(value))
            found.append('%s %s histogram holds %s' % (label, title, bad or 'counts that add up past a float\'s range'))
    return found


def summary(side: Any) -> dict[str, Any] | None:
    """A side's figures for the report: requests, errors, error rate, p95s and exact means (seconds)."""
    if not side:
        return None
    answered, errors = side.get('requests') or 0, side.get('aborted') or 0
    seen = answered + errors
    figures = {'requests': int(seen), 'errors': int(errors),
               'error_rate': round(errors / seen, 4) if seen else None}
    for key, dummy in LATENCIES:
        value = quantile(side.get(key), 0.95)
        figures[key + '_p95_s'] = round(value, 6) if value is not None else None
        average = mean(side.get(key))
        figures[key + '_mean_s'] = round(average, 6) if average is not None else None
    return figures


def _error_problem(canary: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> str | None:
    if not canary['requests'] or baseline is None or not baseline['requests']:
        return None
    rise = canary['error_rate'] - baseline['error_rate']
    if rise <= tolerance:
        return None
    return 'errors %.1f%% of %d requests against %.1f%% of %d (tolerance +%g points)' % (
        canary['error_rate'] * 100, canary['requests'], baseline['error_rate'] * 100, baseline['requests'],
        tolerance * 100)


def _latency_problem(key: str, title: str, canary: dict[str, Any], baseline: dict[str, Any], tolerance: float,
                     alpha: float) -> str | None:
    mine, theirs = quantile(canary.get(key), 0.95), quantile(baseline.get(key), 0.95)
    if mine is None or theirs is None or theirs <= 0:
        return None
    change = mine / theirs - 1
    if change <= tolerance:
        return None
    p_value = rank_test(canary.get(key), baseline.get(key))
    if p_value is not None and p_value >= alpha:
        return None
    means = mean(canary.get(key)), mean(baseline.get(key))
    return 'p95 %s %.4f s against %.4f s (%+.0f%%, tolerance %g%%%s%s)' % (
        title, mine, theirs, change * 100, tolerance * 100,
        '' if None in means or not means[1] else '; mean %.4f s against %.4f s, %+.0f%%' % (
            means[0], means[1], (means[0] / means[1] - 1) * 100),
        '' if p_value is None else '; rank test p=%.2g' % p_value)


def verdict(canary: Any, baselines: list[Any], settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """{verdict, reason, canary, baseline, baseline_servers}: the bake's outcome, the figures of each side.

    canary: the canary's figures over the bake (None: it exports none); baselines: a list of the baseline
    servers' figures over the same window (empty: none in the router)."""
    settings = dict(DEFAULTS, **(settings or {}))
    min_requests = as_int(settings['min_requests'])
    tolerance, errors, alpha = (as_float(settings['latency_tolerance']), as_float(settings['error_tolerance']),
                                as_float(settings['alpha']))
    servers = len([b for b in baselines or [] if b])
    broken = not_finite('the canary\'s', canary)
    for index, figures in enumerate(baselines or []):
        broken.extend(not_finite('baseline server %d\'s' % (index + 1), figures))
    # Each server's figures finite, their sum may not be (two servers of 1e308 requests).
    baseline = merged(baselines or []) if not broken else None
    broken.extend(not_finite('the baseline servers\' merged', baseline))
    if broken:
        return {'canary': None, 'baseline': None, 'baseline_servers': servers, 'verdict': 'inconclusive',
                'reason': 'the figures cannot be judged, a figure is not a finite number: %s (a broken exporter; look'
                          ' at its /metrics)' % '; '.join(broken)}
    mine, theirs = summary(canary), summary(baseline)
    result = {'canary': mine, 'baseline': theirs, 'baseline_servers': servers}
    if canary is None:
        return dict(result, verdict='inconclusive',
                    reason='the canary exports no live figures (/metrics without --enable-metrics?)')
    lacking = []
    if mine['requests'] < min_requests:
        lacking.append('the canary served %d requests, fewer than %d' % (mine['requests'], min_requests))
    if theirs is None:
        lacking.append('no server on the previous version exports live figures in the router')
    elif theirs['requests'] < min_requests:
        lacking.append('the baseline served %d requests, fewer than %d' % (theirs['requests'], min_requests))
    problems = []
    if not lacking:
        problems.append(_error_problem(mine, theirs, errors))
        problems.extend(_latency_problem(key, title, canary, baseline, tolerance, alpha) for key, title in LATENCIES)
        # Each latency check needs samples on both sides: without them it would have passed unseen.
        lacking.extend(_latency_gaps(canary, baseline, mine, theirs))
    elif mine['requests'] >= min_requests and mine['error_rate'] > errors:
        # Errors need no baseline to be wrong: a canary that fails its requests fails the bake on its own.
        problems.append('errors %.1f%% of %d requests (tolerance %g%%, no baseline to compare with)' % (
            mine['error_rate'] * 100, mine['requests'], errors * 100))
    problems = [problem for problem in problems if problem]
    if problems:
        return dict(result, verdict='fail', reason='; '.join(problems))
    if lacking:
        return dict(result, verdict='inconclusive', reason='; '.join(lacking))
    return dict(result, verdict='pass', reason='within the tolerances over %d canary and %d baseline requests' % (
        mine['requests'], theirs['requests']))
