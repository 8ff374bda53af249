# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bounded serving benchmark against one SGLang server: streamed /generate at fixed concurrency levels.

Domain layer, standard library only. It speaks SGLang's own API, so the same code measures the lab's
stand-in and a real server: POST /generate with ``"stream": true`` answers server-sent events, one
``data: {json}`` event per decode output (``text`` so far, ``meta_info`` with ``completion_tokens`` so
far and ``finish_reason`` null until the last one), then ``data: [DONE]``. Every request asks for a
fixed length (``max_new_tokens``, ``ignore_eos``, greedy), so levels and runs compare.

Measured per request from the arrival times of its events, as SGLang's own bench_serving does:
time to first token (TTFT: request sent to the first event that carries output) and inter-token latency
(ITL: the gap between two events divided by the tokens the later one added, one sample per token, so a
speculative step that accepts three tokens counts three gaps of a third). Per level: output tokens per
second (every token streamed in the level over the level's wall time), TTFT and ITL p50/p95 over all
samples of the level, errors (refused, an HTTP error, an ``error`` event, a stream that ends unfinished,
an answer that is not SGLang's or goes over a cap) and the first error's reason.

Bounded: requests_per_level requests per level, and a level stops at timeout_s (its requests in flight
are cut, it reports ``timed_out``): every exchange ends by the level's deadline, however the server paces
its bytes, and reads at most MAX_EVENT_LINE for one event (_http). The connections go straight to the server
(never an http_proxy from the environment), with the API key as a Bearer token.

Whose port: a caller that knows the server's processes hands run_benchmark a check of the socket listening at the
URL (_server's Server.listener_not_ours), asked before each level and before /metrics: a server that died between
levels leaves its port to whoever binds it next, and the next level's requests carry the key.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import (
    HttpError, JsonError, bearer, http_request, open_response, parse_json)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._live_metrics import (
    MAX_METRICS_BODY, LiveMetricsError, finite_samples)

# SGLang's Prometheus names (--enable-metrics) and the keys run_benchmark reports them under.
METRICS = (('sglang:gen_throughput', 'gen_throughput'), ('sglang:spec_accept_length', 'spec_accept_length'))
PROGRESS_INTERVAL_S = 1.0
# The shortest exchange: a request issued just before its level's deadline still gets one.
MIN_READ_S = 0.05
# One event line: SGLang's events carry the text so far, a few KB for thousands of tokens; a line past this is
# a broken or hostile server, and reading it on would only grow memory.
MAX_EVENT_LINE = 1024 * 1024


def percentile(samples: list[Any], fraction: float) -> float | None:
    """The fraction (0..1) percentile of samples by linear interpolation between closest ranks.

    The method numpy calls 'linear' and statistics.quantiles 'inclusive': rank (n - 1) * fraction,
    interpolated between the samples either side; None for no sample.
    """
    ordered = sorted(samples)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * fraction
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def request_timings(sent: float, arrivals: list[Any]) -> tuple[float | None, list[Any]]:
    """(ttft_s or None, itl samples) of one request from (arrival time, completion_tokens) per event.

    Events that add no token (SGLang may send one with the finish reason only) are skipped; the
    first event with output gives the TTFT, each later one gap / tokens-added samples.
    """
    ttft, itl = None, []
    last_time, last_tokens = None, 0
    for arrived, tokens in arrivals:
        added = tokens - last_tokens
        if added <= 0:
            continue
        if ttft is None:
            ttft = arrived - sent
        else:
            itl.extend([(arrived - last_time) / added] * added)
        last_time, last_tokens = arrived, tokens
    return ttft, itl


def summarize_level(concurrency: int, requests: int, outcomes: list[dict[str, Any]], wall_s: float,
                    timed_out: bool) -> dict[str, Any]:
    """One level's figures from its request outcomes (see stream_request)."""
    ttft = [o['ttft_s'] for o in outcomes if o['ttft_s'] is not None]
    itl = [sample for o in outcomes for sample in o['itl_s']]
    tokens = sum(o['output_tokens'] for o in outcomes)

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 6)
    return {'concurrency': concurrency, 'requests': requests,
            'completed': sum(1 for o in outcomes if o['completed']),
            'errors': sum(1 for o in outcomes if o['error'] is not None),
            'output_tokens': tokens, 'wall_s': round(wall_s, 4),
            'output_tok_s': round(tokens / wall_s, 2) if wall_s > 0 else 0.0,
            'ttft_p50_s': rounded(percentile(ttft, 0.5)), 'ttft_p95_s': rounded(percentile(ttft, 0.95)),
            'itl_p50_s': rounded(percentile(itl, 0.5)), 'itl_p95_s': rounded(percentile(itl, 0.95)),
            'timed_out': bool(timed_out),
            'first_error': next((o['error'] for o in outcomes if o['error'] is not None), None)}


def parse_event(line: bytes) -> Any:
    """('done', None), ('chunk', dict) or (None, None) for one line of SGLang's event stream."""
    line = line.strip()
    if not line.startswith(b'data:'):
        return None, None
    payload = line[len(b'data:'):].strip()
    if payload == b'[DONE]':
        return 'done', None
    try:
        chunk = parse_json(payload)
    except JsonError as exc:
        return 'chunk', {'error': {'message': 'an event that is not JSON: %s' % exc}}
    return 'chunk', chunk if isinstance(chunk, dict) else {'error': {'message': 'an event that is not an object'}}


def event_progress(chunk: dict[str, Any]) -> tuple[int, bool]:
    """(completion_tokens so far, finished) of one event; ValueError naming what is malformed."""
    meta = chunk.get('meta_info')
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ValueError('an event whose meta_info is not an object')
    tokens = meta.get('completion_tokens') or 0
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError('an event whose completion_tokens is not a count: %.100r' % (tokens,))
    return tokens, meta.get('finish_reason') is not None


def parse_metrics(text: str) -> dict[str, float]:
    """{'gen_throughput', 'spec_accept_length'} from Prometheus text (None for a name absent).

    A gauge exported once per rank or model (several labelled samples) gives their sum for the
    throughput and their mean for the acceptance length. Raises LiveMetricsError naming a sample of them
    that is not a finite number (finite_samples).
    """
    found = {key: [] for dummy, key in METRICS}
    names = dict(METRICS)
    for name, dummy, value in finite_samples(text, names):
        found[names[name]].append(value)
    throughput, accept = found['gen_throughput'], found['spec_accept_length']
    return {'gen_throughput': sum(throughput) if throughput else None,
            'spec_accept_length': sum(accept) / len(accept) if accept else None}


def read_metrics_from(base_url: str, timeout: float, api_key: str | None = None) -> dict[str, float] | None:
    """The server's figures from /metrics, or None where it exports none (404, no answer, not text) or none to
    believe (a figure that is not a finite number: the benchmark's own measurements stand alone then, as they do
    without /metrics; these figures are reported, never judged)."""
    status, body = http_request('GET', base_url + '/metrics', timeout, headers=bearer(api_key), max_body=MAX_METRICS_BODY)
    if status != 200:
        return None
    try:
        return parse_metrics(body.decode('utf-8'))
    except (UnicodeDecodeError, LiveMetricsError):
        return None


def generate_body(prompt: str, max_new_tokens: int) -> bytes:
    """A fixed-length, repeatable streamed request: greedy, the end-of-sequence token ignored."""
    return json.dumps({'text': prompt, 'stream': True, 'sampling_params': {
        'max_new_tokens': max_new_tokens, 'ignore_eos': True, 'temperature': 0}}).encode('utf-8')


def stream_request(base_url: str, body: dict[str, Any], api_key: str | None, deadline: float,
                   clock: Callable[[], float], max_new_tokens: int | None = None) -> dict[str, Any]:
    """One streamed /generate: {'completed', 'error', 'cut', 'ttft_s', 'itl_s', 'output_tokens'}.

    The whole exchange ends by the level's deadline, however the server paces its bytes (_http), so a
    server that stops answering, trickles or streams without end cannot hold the benchmark: the request is
    then 'cut' (not an error: the level says it timed out). A line over MAX_EVENT_LINE, an event that is not
    SGLang's, or more tokens than max_new_tokens asked is an error. Only events that add tokens are kept,
    so a request holds at most max_new_tokens arrival times.
    """
    arrivals, sent, finished, error = [], clock(), False, None
    headers = dict(bearer(api_key), **{'Content-Type': 'application/json', 'Accept': 'text/event-stream'})
    try:
        with open_response('POST', base_url + '/generate', max(MIN_READ_S, deadline - clock()), body=body,
                           headers=headers) as response:
            if response.status != 200:
                error = 'HTTP %d' % response.status
            last_tokens = 0
            while error is None:
                line = response.readline(MAX_EVENT_LINE)
                if not line:
                    error = None if finished else 'the stream ended before the request finished'
                    break
                kind, chunk = parse_event(line)
                if kind == 'done':
                    break
                if kind is None:
                    continue
                if 'error' in chunk:
                    error = 'the server answered an error: %.300s' % (chunk['error'],)
                    break
                tokens, last = event_progress(chunk)
                if max_new_tokens is not None and tokens > max_new_tokens:
                    error = 'the server streamed %d tokens, more than the %d asked' % (tokens, max_new_tokens)
                    break
                if tokens > last_tokens:
                    arrivals.append((clock(), tokens))
                    last_tokens = tokens
                finished = finished or last
        if error is None and not finished:
            error = 'the stream ended without a finish reason'
    except (HttpError, ValueError) as exc:
        error = str(exc)
    cut = error is not None and clock() >= deadline
    ttft, itl = request_timings(sent, arrivals)
    return {'completed': error is None, 'error': None if cut else error, 'cut': cut, 'ttft_s': ttft, 'itl_s': itl,
            'output_tokens': arrivals[-1][1] if arrivals else 0}


def failed_outcome(error: str) -> dict[str, Any]:
    """The outcome of a request that failed before it streamed anything."""
    return {'completed': False, 'error': error, 'cut': False, 'ttft_s': None, 'itl_s': [], 'output_tokens': 0}


def run_level(base_url: str, concurrency: int, requests: int, body: bytes, timeout_s: float, api_key: str | None,
              on_progress: Callable, clock: Callable, max_new_tokens: int | None = None) -> dict[str, Any]:
    """requests streamed requests, concurrency at a time, within timeout_s: the level's figures."""
    started = clock()
    deadline = started + timeout_s
    outcomes, lock = [], threading.Lock()
    issued = [0]

    def worker() -> None:
        while True:
            with lock:
                if issued[0] >= requests or clock() >= deadline:
                    return
                issued[0] += 1
            try:
                outcome = stream_request(base_url, body, api_key, deadline, clock, max_new_tokens)
            except Exception as exc:
                # Every request issued is counted: whatever an answer makes the parsing raise is a failed
                # request, never a thread that dies and takes its request out of the figures.
                outcome = failed_outcome('%s: %s' % (type(exc).__name__, exc))
            with lock:
                outcomes.append(outcome)
    threads = [threading.Thread(target=worker) for dummy in range(min(concurrency, requests))]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(PROGRESS_INTERVAL_S)
            if on_progress is not None:
                on_progress()
    # Once more at the level's end, however fast it ran (its threads may all be done before the first join):
    # every level renews the guard's lease at least once.
    if on_progress is not None:
        on_progress()
    wall = clock() - started
    timed_out = issued[0] < requests or any(o['cut'] for o in outcomes)
    return summarize_level(concurrency, requests, outcomes, wall, timed_out)


class ListenerRefused(RuntimeError):
    """The check of run_benchmark found the socket listening at the URL not the server's: nothing more was sent."""


def _checked(listener_check: Callable, before: str) -> None:
    """Raise ListenerRefused, saying before what, when listener_check (if any) finds the port not the server's."""
    why = listener_check() if listener_check is not None else None
    if why is not None:
        raise ListenerRefused('before %s, nothing sent: %s' % (before, why))


def run_benchmark(base_url: str, levels: list[int], requests_per_level: int, max_new_tokens: int, prompt: str,
                  timeout_s: float, api_key: str | None = None, read_metrics: bool = True,
                  on_progress: Callable | None = None, clock: Callable = time.monotonic,
                  listener_check: Callable | None = None) -> dict[str, Any]:
    """Measure levels (concurrencies) in order, then read /metrics where asked.

    -> {'levels': [{'concurrency', 'requests', 'completed', 'errors', 'output_tokens', 'wall_s',
                    'output_tok_s', 'ttft_p50_s', 'ttft_p95_s', 'itl_p50_s', 'itl_p95_s', 'timed_out',
                    'first_error'}],
        'metrics': {'gen_throughput', 'spec_accept_length'} or None, 'elapsed_s'}

    timeout_s bounds each level (the whole run: len(levels) * timeout_s and one /metrics read).
    'metrics' is SGLang's gauges as the server last logged them (during the last level); None when
    read_metrics is false or the server exports none. on_progress() is called about every second
    while a level runs (a caller renews a lease there).

    listener_check() -> None, or why the socket listening at base_url is not the server's: asked before each level
    and before /metrics, its why raised as ListenerRefused (the levels measured before it are dropped).
    """
    started = clock()
    base_url = base_url.rstrip('/')
    body = generate_body(prompt, max_new_tokens)
    results = []
    for concurrency in levels:
        _checked(listener_check, 'concurrency %d' % concurrency)
        results.append(run_level(base_url, int(concurrency), int(requests_per_level), body, float(timeout_s),
                                 api_key, on_progress, clock, int(max_new_tokens)))
    metrics = None
    if read_metrics:
        _checked(listener_check, 'the /metrics read')
        metrics = read_metrics_from(base_url, min(10.0, float(timeout_s)), api_key)
    return {'levels': results, 'metrics': metrics, 'elapsed_s': round(clock() - started, 3)}
