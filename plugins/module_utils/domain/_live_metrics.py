# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server saw of its live traffic, from two scrapes of its Prometheus /metrics (``--enable-metrics``).

Domain layer, standard library only. SGLang 0.5.23's tokenizer manager exports, since the server's start
(sglang/srt/observability/metrics_collector.py): histograms ``sglang:time_to_first_token_seconds``,
``sglang:inter_token_latency_seconds`` and ``sglang:e2e_request_latency_seconds``, counters
``sglang:num_requests_total``, ``sglang:num_aborted_requests_total`` and ``sglang:generation_tokens_total``.
A snapshot sums each over its label sets (``model_name``, ``is_streaming``, a rank); the difference of two
snapshots is what the server served between them (a series absent from the first scrape counts from 0:
prometheus_client exports a labelled series from its first sample on). Counters only grow: one that went down
means the server restarted between the scrapes, and the difference is refused rather than guessed.

A histogram is ``{'bounds': [upper bounds, +Inf last], 'counts': [samples per bucket, not cumulative], 'sum':
the samples' exact total (its ``_sum`` series; None where not exported)}``: the buckets give the quantiles and the
rank test, the sum the exact mean that the buckets' coarseness cannot distort.

Every sample read must be a finite number: Python's float() takes ``NaN``, ``+Inf`` and ``1e309`` (infinity),
which compare false with every bound and turn a verdict's checks off (a NaN bucket reads as no sample at all), so
a reading that holds one is refused, naming the series (finite_samples, shared with _serving_benchmark). Finite
samples may still add up past a float's range (two ranks exporting 1e308 sum to infinity, and infinity less
infinity is NaN): every sum of a snapshot and every difference is checked too (_finite), so that nothing but finite
numbers reaches the verdict.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import NO_ANSWER, http_request

HISTOGRAMS = (('ttft', 'sglang:time_to_first_token_seconds'), ('itl', 'sglang:inter_token_latency_seconds'),
              ('e2e', 'sglang:e2e_request_latency_seconds'))
COUNTERS = (('requests', 'sglang:num_requests_total'), ('aborted', 'sglang:num_aborted_requests_total'),
            ('tokens', 'sglang:generation_tokens_total'))
# Prometheus text of a server with histograms per rank: a few hundred KB.
MAX_METRICS_BODY = 8 * 1024 * 1024


class LiveMetricsError(Exception):
    pass


def prometheus_sample(line: str) -> tuple[str, dict[str, str], float] | None:
    """(name, labels, value) of one sample line; None for a comment, a blank or a line that is not one. The value
    is what float() reads, NaN and infinities included: read the series a figure comes from through finite_samples."""
    line = line.strip()
    if not line or line.startswith('#'):
        return None
    brace = line.find('{')
    space = line.find(' ')
    if brace != -1 and (space == -1 or brace < space):
        name, rest = line[:brace], line[brace + 1:]
        labels, rest = _labels(rest)
        if labels is None:
            return None
    else:
        name, dummy, rest = line.partition(' ')
        labels = {}
    fields = rest.split()
    try:
        return name, labels, float(fields[0])
    except (IndexError, ValueError):
        return None


def finite_samples(text: str, names: set[str] | dict[str, str]) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of the series `names` in Prometheus text, in order; raises
    LiveMetricsError naming the first whose value is not a finite number (NaN, +Inf, or past a float's range such
    as 1e309). Series outside `names` are not looked at: an exporter may hold a NaN gauge of its own."""
    for line in text.splitlines():
        sample = prometheus_sample(line)
        if sample is None or sample[0] not in names:
            continue
        name, labels, value = sample
        if not math.isfinite(value):
            raise LiveMetricsError('%s{%s} reads %s, not a finite number: the reading is refused (a broken exporter,'
                                   ' or not SGLang answering there; look at its /metrics)' % (
                                       name, ','.join('%s="%s"' % item for item in sorted(labels.items())), value))
        yield sample


def _finite(value: float, series: str, what: str) -> float:
    """value, or LiveMetricsError naming the series when it is not a finite number (a sum or a difference of finite
    samples beyond a float's range)."""
    if not math.isfinite(value):
        raise LiveMetricsError('%s %s to %s, not a finite number: the reading is refused (a broken exporter, or not'
                               ' SGLang answering there; look at its /metrics)' % (series, what, value))
    return value


def _labels(text: str) -> tuple[dict[str, str], str]:
    """({label: value}, the text after the closing brace) of `a="x",b="y"} 1`; (None, '') when malformed."""
    labels, i = {}, 0
    while True:
        while i < len(text) and text[i] in ' ,':
            i += 1
        if i < len(text) and text[i] == '}':
            return labels, text[i + 1:]
        equals = text.find('=', i)
        if equals == -1 or equals + 1 >= len(text) or text[equals + 1] != '"':
            return None, ''
        key, i, value = text[i:equals].strip(), equals + 2, []
        while i < len(text) and text[i] != '"':
            if text[i] == '\\' and i + 1 < len(text):
                value.append({'n': '\n'}.get(text[i + 1], text[i + 1]))
                i += 2
            else:
                value.append(text[i])
                i += 1
        if i >= len(text):
            return None, ''
        labels[key] = ''.join(value)
        i += 1


def _bound(text: str) -> float:
    """A bucket's upper bound (its `le`); ValueError for one that is not a number or is NaN (no order)."""
    bound = math.inf if text in ('+Inf', 'Inf', '+inf', 'inf') else float(text)
    if math.isnan(bound):
        raise ValueError('NaN')
    return bound


def snapshot(text: str) -> dict[str, Any]:
    """The live figures of one scrape: counters and histograms summed over their label sets; a figure the
    server does not export is None (a server without --enable-metrics exports none of them). Raises
    LiveMetricsError for a sample of them that is not a finite number, or a histogram without its +Inf bucket."""
    counters = {key: None for key, dummy in COUNTERS}
    cumulative = {key: {} for key, dummy in HISTOGRAMS}
    counter_of = {name: key for key, name in COUNTERS}
    bucket_of = {name + '_bucket': key for key, name in HISTOGRAMS}
    sum_of = {name + '_sum': key for key, name in HISTOGRAMS}
    count_of = {name + '_count': key for key, name in HISTOGRAMS}
    sums, samples = {key: None for key, dummy in HISTOGRAMS}, {key: 0.0 for key, dummy in HISTOGRAMS}
    wanted = set(counter_of) | set(bucket_of) | set(sum_of) | set(count_of)
    summed = 'sums over its label sets'
    for name, labels, value in finite_samples(text, wanted):
        if name in counter_of:
            key = counter_of[name]
            counters[key] = _finite((counters[key] or 0.0) + value, name, summed)
        elif name in bucket_of and 'le' in labels:
            try:
                bound = _bound(labels['le'])
            except ValueError:
                continue
            buckets = cumulative[bucket_of[name]]
            buckets[bound] = _finite(buckets.get(bound, 0.0) + value, '%s{le="%s"}' % (name, labels['le']), summed)
        elif name in sum_of:
            key = sum_of[name]
            sums[key] = _finite((sums[key] or 0.0) + value, name, summed)
        elif name in count_of:
            samples[count_of[name]] = _finite(samples[count_of[name]] + value, name, summed)
    figures = dict(counters)
    for key, buckets in cumulative.items():
        if not buckets:
            figures[key] = None
            continue
        histogram = _histogram(buckets)
        # A sum believed only when the series that gave it hold every sample the buckets count (a _count per
        # label set, as prometheus_client exports them): a sum of some label sets over all samples would lie.
        whole = sums[key] is not None and samples[key] == buckets[math.inf]
        figures[key] = dict(histogram, sum=sums[key] if whole else None)
    return figures


def _histogram(cumulative: dict[float, float]) -> dict[str, list[float]]:
    bounds = sorted(cumulative)
    if bounds[-1] != math.inf:
        raise LiveMetricsError('a histogram without its +Inf bucket')
    counts, below = [], 0.0
    for bound in bounds:
        # Within [0, the largest float]: below is never negative, a negative overflow is clamped.
        counts.append(max(0.0, cumulative[bound] - below))
        below = max(below, cumulative[bound])
    return {'bounds': bounds, 'counts': counts}


def difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the server served between two snapshots; raises LiveMetricsError when it restarted in between
    (a counter went down) or a histogram changed its buckets."""
    served = {}
    for key, dummy in COUNTERS:
        if after[key] is None:
            served[key] = None
        elif before[key] is None:
            # A labelled series is exported from its first sample on (prometheus_client): none before is 0.
            served[key] = after[key]
        elif after[key] < before[key]:
            raise LiveMetricsError('%s went down between the scrapes: the server restarted' % dict(COUNTERS)[key])
        else:
            served[key] = _finite(after[key] - before[key], dict(COUNTERS)[key], 'grew between the scrapes')
    for key, name in HISTOGRAMS:
        old, new = before[key], after[key]
        if new is None:
            served[key] = None
            continue
        if old is None:
            old = {'bounds': new['bounds'], 'counts': [0.0] * len(new['counts']), 'sum': 0.0}
        if old['bounds'] != new['bounds']:
            raise LiveMetricsError('%s changed its buckets between the scrapes' % name)
        counts = [_finite(b - a, name, 'grew between the scrapes') for a, b in zip(old['counts'], new['counts'])]
        if any(count < 0 for count in counts):
            raise LiveMetricsError('%s went down between the scrapes: the server restarted' % name)
        total = None
        if new.get('sum') is not None and old.get('sum') is not None:
            # Latencies are never negative, so their sum only grows; a float's rounding may still take a hair off.
            total = max(0.0, _finite(new['sum'] - old['sum'], name + '_sum', 'grew between the scrapes'))
        served[key] = {'bounds': new['bounds'], 'counts': counts, 'sum': total}
    return served


def jsonable(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures with +Inf written as the string "+Inf" (JSON has no infinity); LiveMetricsError naming a figure
    that is not a finite number (Python's json writes NaN and Infinity, which no verdict can read)."""
    out = dict(figures)
    for key, name in COUNTERS:
        if out.get(key) is not None:
            _finite(out[key], name, 'came')
    for key, name in HISTOGRAMS:
        if out.get(key) is not None:
            for value in list(out[key]['counts']) + [out[key].get('sum') or 0.0]:
                _finite(value, name, 'came')
            out[key] = {'bounds': ['+Inf' if bound == math.inf else bound for bound in out[key]['bounds']],
                        'counts': list(out[key]['counts']), 'sum': out[key].get('sum')}
    return out


def scrape(base_url: str, timeout: float) -> dict[str, Any] | None:
    """The server's snapshot now; None when it exports no /metrics (404: started without --enable-metrics).
    Raises LiveMetricsError when it does not answer, answers what is not Prometheus text, or a figure it reads is
    not a finite number (finite_samples)."""
    status, body = http_request('GET', base_url + '/metrics', timeout, max_body=MAX_METRICS_BODY)
    if status == 404:
        return None
    if status == NO_ANSWER:
        raise LiveMetricsError('%s/metrics did not answer: %s' % (base_url, body.decode('utf-8', 'replace')))
    if status != 200:
        raise LiveMetricsError('%s/metrics answered %s' % (base_url, status))
    try:
        return snapshot(body.decode('utf-8'))
    except UnicodeDecodeError:
        raise LiveMetricsError('%s/metrics is not UTF-8 text' % base_url)
