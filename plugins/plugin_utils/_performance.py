# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The performance gate's verdict: the new server's serving benchmark against the old one's, per level.

A benchmark is what M(gpuops.sglang.sglang_benchmark) returns (module_utils/domain/_serving_benchmark.py): one
entry per concurrency level with output tokens per second, p95 time to first token and inter-token
latency, errors and whether it ran out of time. The candidate fails a level when its output tok/s drops
below the baseline's by more than the throughput tolerance, its p95 inter-token latency rises above the
baseline's by more than the ITL tolerance, any of its requests failed, or the level is missing or timed
out. A level the baseline cannot speak for (missing, timed out) is not compared, and says so.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_float, as_int

FIGURES = ('output_tok_s', 'ttft_p95_s', 'itl_p95_s', 'errors')
VERDICTS = ('pass', 'fail', 'skipped')
BASELINES = ('measure', 'stored')


def default_levels(threshold: int) -> list[int]:
    """Concurrency 1 (where speculation helps) and twice the dynamic-speculation threshold (where it must stop)."""
    return sorted({1, 2 * max(as_int(threshold), 1)})


def levels_to_measure(configured: list[Any] | None, threshold: int) -> list[int]:
    """sglang_perf_levels, or the default levels when it is empty; sorted, without repeats."""
    chosen = [as_int(level) for level in configured or []]
    return sorted(set(chosen)) if chosen else default_levels(threshold)


def figures(level: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report's four figures of one benchmark level (None for a level not measured)."""
    if level is None:
        return None
    return {name: level.get(name) for name in FIGURES}


def by_level(benchmark: Any) -> dict[int, Any]:
    """{concurrency: level entry} of a benchmark result ({} for none)."""
    return {as_int(level.get('concurrency')): level for level in (benchmark or {}).get('levels') or []}


def _percent(value: float) -> str:
    return '%g%%' % round(value * 100, 1)


def _change(before: float, after: float) -> float:
    return (after - before) / before


def throughput_problem(concurrency: int, before: dict[str, Any], after: dict[str, Any], tolerance: float) -> str | None:
    """A drop of output tok/s beyond the tolerance, in words; None within it."""
    old, new = before.get('output_tok_s'), after.get('output_tok_s')
    if not old or new is None:
        return None
    change = _change(float(old), float(new))
    if -change <= tolerance:
        return None
    return 'concurrency %d: output tok/s %.1f -> %.1f (%+.1f%%, tolerance %s)' % (
        concurrency, old, new, change * 100, _percent(tolerance))


def itl_problem(concurrency: int, before: dict[str, Any], after: dict[str, Any], tolerance: float) -> str | None:
    """A rise of p95 inter-token latency beyond the tolerance, in words; None within it (or not measured)."""
    old, new = before.get('itl_p95_s'), after.get('itl_p95_s')
    if not old or new is None:
        return None
    change = _change(float(old), float(new))
    if change <= tolerance:
        return None
    return 'concurrency %d: p95 inter-token latency %.4f s -> %.4f s (%+.1f%%, tolerance %s)' % (
        concurrency, old, new, change * 100, _percent(tolerance))


def candidate_problem(concurrency: int, after: dict[str, Any] | None) -> str | None:
    """What fails the candidate at a level whatever the baseline says: missing, timed out, errors."""
    if after is None:
        return 'concurrency %d: not measured on the new server' % concurrency
    if after.get('timed_out'):
        return 'concurrency %d: the new server did not finish in time (%s of %s requests completed)' % (
            concurrency, after.get('completed'), after.get('requests'))
    if as_int(after.get('errors')) > 0:
        return 'concurrency %d: %d of %s requests failed on the new server' % (
            concurrency, as_int(after.get('errors')), after.get('requests'))
    return None


def baseline_gap(concurrency: int, before: dict[str, Any] | None, missing: str = 'no baseline') -> str | None:
    """Why the baseline cannot speak for a level (None when it can)."""
    if before is None:
        return 'concurrency %d: %s' % (concurrency, missing)
    if before.get('timed_out'):
        return 'concurrency %d: the baseline did not finish in time, not compared' % concurrency
    if not before.get('output_tok_s'):
        return 'concurrency %d: the baseline produced no tokens, not compared' % concurrency
    return None


def _judge_level(concurrency: int, before: dict[str, Any] | None, after: dict[str, Any] | None,
                 tolerances: tuple[float, float], missing: str) -> tuple[list[Any], str | None | None]:
    """(problems, gap) of one level: what fails it, and why it was not compared (None when it was)."""
    problem = candidate_problem(concurrency, after)
    if problem is not None:
        return [problem], None
    gap = baseline_gap(concurrency, before, missing)
    if gap is not None:
        return [], gap
    found = [throughput_problem(concurrency, before, after, tolerances[0]),
             itl_problem(concurrency, before, after, tolerances[1])]
    return [text for text in found if text is not None], None


def verdict(levels: list[int], before: Any, after: dict[str, Any], throughput_tolerance: float, itl_tolerance: float,
            baseline: str = 'measure', missing: str = 'no baseline') -> dict[str, Any]:
    """The gate's verdict over the levels: {verdict, reason, baseline, levels, metrics, elapsed_s}.

    before and after: benchmark results (before None: no baseline). pass: every level compared and within
    the tolerances; fail: a level regressed or the candidate failed one; skipped: no level could be compared.
    missing: what a level without a baseline says (why there is none).
    """
    old, new = by_level(before), by_level(after)
    tolerances = (as_float(throughput_tolerance), as_float(itl_tolerance))
    problems, gaps, rows = [], [], []
    for concurrency in levels:
        found, gap = _judge_level(concurrency, old.get(concurrency), new.get(concurrency), tolerances, missing)
        problems.extend(found)
        gaps.extend([gap] if gap is not None else [])
        rows.append({'concurrency': concurrency, 'before': figures(old.get(concurrency)),
                     'after': figures(new.get(concurrency))})
    if problems:
        outcome, reason = 'fail', '; '.join(problems + gaps)
    elif len(gaps) == len(levels):
        outcome, reason = 'skipped', 'nothing to compare with: ' + '; '.join(gaps)
    else:
        outcome = 'pass'
        reason = 'within the tolerances (output tok/s -%s, p95 inter-token latency +%s) at concurrency %s' % (
            _percent(tolerances[0]), _percent(tolerances[1]),
            ', '.join(str(row['concurrency']) for row in rows if old.get(row['concurrency']) is not None))
        reason += ''.join('; ' + gap for gap in gaps)
    return dict(performance(outcome, reason, baseline, before, after), levels=rows)


def performance(outcome: str, reason: str, baseline: str | None = None, before: Any = None,
                after: Any = None) -> dict[str, Any]:
    """The report's `performance` block with every key, levels empty (verdict() fills them)."""
    return {'verdict': outcome, 'reason': reason, 'baseline': baseline, 'levels': [],
            'metrics': {'before': (before or {}).get('metrics'), 'after': (after or {}).get('metrics')},
            'elapsed_s': {'before': (before or {}).get('elapsed_s'), 'after': (after or {}).get('elapsed_s')}}


def stored_baseline(report: Any) -> dict[str, Any] | None:
    """A benchmark result rebuilt from a previous report's `after` figures (None when it has none)."""
    rows = ((report or {}).get('performance') or {}).get('levels') or []
    levels = [dict(row['after'], concurrency=row['concurrency'], timed_out=False) for row in rows if row.get('after')]
    if not levels:
        return None
    return {'levels': levels, 'metrics': ((report.get('performance') or {}).get('metrics') or {}).get('after'),
            'elapsed_s': None}


def unjudged(gate_enabled: bool, why: str) -> dict[str, Any]:
    """The `performance` block of a run the gate did not judge: the gate off, or why nothing was measured."""
    if not gate_enabled:
        return performance('skipped', 'the performance gate is off (sglang_perf_gate)')
    return performance('skipped', why)
