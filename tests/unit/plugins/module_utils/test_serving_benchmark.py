"""The serving benchmark: its statistics on recorded samples, and its HTTP against a scripted loopback server.

The statistics are pure functions over what a stream gave (arrival times and completion_tokens per
event); the HTTP tests answer SGLang's event stream from a real listener, so the parsing, the error
counting, the time bound and the /metrics read are the library's own code end to end.
"""
import json
import re
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._live_metrics import LiveMetricsError
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._serving_benchmark import (
    ListenerRefused,
    generate_body,
    parse_event,
    parse_metrics,
    percentile,
    read_metrics_from,
    request_timings,
    run_benchmark,
    summarize_level,
)
from helpers.hostile_http import endless_events, endless_line, hostile_http, huge_length, trickle  # noqa: F401
from helpers.http_responder import Reply, closed_port_url, http_responder  # noqa: F401  (the fixture)


@pytest.mark.parametrize('samples, fraction, expected', [
    ([], 0.5, None),
    ([7.0], 0.95, 7.0),
    ([3.0, 1.0, 2.0], 0.5, 2.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
    # rank (10 - 1) * 0.95 = 8.55: between the 9th (9) and the 10th (100) sample.
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 100], 0.95, 9 + 0.55 * 91),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 100], 0.0, 1),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 100], 1.0, 100),
])
def test_percentile_interpolates_linearly_between_closest_ranks(samples, fraction, expected):
    got = percentile(samples, fraction)
    assert got is None if expected is None else got == pytest.approx(expected)


def test_percentile_matches_statistics_inclusive_quantiles():
    statistics = pytest.importorskip('statistics')
    samples = [0.031, 0.029, 0.044, 0.030, 0.12, 0.028, 0.033, 0.035, 0.027, 0.05, 0.03]
    cuts = statistics.quantiles(samples, n=20, method='inclusive')
    assert percentile(samples, 0.95) == pytest.approx(cuts[18])
    assert percentile(samples, 0.5) == pytest.approx(statistics.median(samples))


# Recorded streams: (sent, [(arrival, completion_tokens so far)]) -> (ttft, itl samples).
@pytest.mark.parametrize('sent, arrivals, ttft, itl', [
    # Plain decoding: one token an event.
    (10.0, [(10.5, 1), (10.6, 2), (10.8, 3)], 0.5, [0.1, 0.2]),
    # Speculative decoding: an event that accepts three tokens counts three gaps of a third.
    (0.0, [(0.2, 1), (0.5, 4), (0.6, 5)], 0.2, [0.1, 0.1, 0.1, 0.1]),
    # An event that adds nothing (the finish reason alone) is no sample.
    (0.0, [(0.1, 1), (0.3, 2), (0.4, 2)], 0.1, [0.2]),
    # The first event may already carry several tokens: the TTFT, no ITL sample.
    (1.0, [(1.25, 3)], 0.25, []),
    # Nothing streamed: no TTFT.
    (0.0, [], None, []),
    (0.0, [(0.1, 0)], None, []),
])
def test_request_timings_follow_sglang_bench_serving(sent, arrivals, ttft, itl):
    got_ttft, got_itl = request_timings(sent, arrivals)
    assert got_ttft == (pytest.approx(ttft) if ttft is not None else None)
    assert got_itl == pytest.approx(itl)


def outcome(ttft=None, itl=(), tokens=0, completed=True, error=None, cut=False):
    return {'ttft_s': ttft, 'itl_s': list(itl), 'output_tokens': tokens, 'completed': completed, 'error': error,
            'cut': cut}


def test_a_level_sums_tokens_over_its_wall_time_and_pools_the_samples():
    outcomes = [outcome(0.2, [0.1, 0.1, 0.3], 4), outcome(0.4, [0.2, 0.2, 0.2], 4),
                outcome(error='HTTP 503', completed=False), outcome(0.3, [0.1], 2, completed=False, cut=True)]
    level = summarize_level(2, 5, outcomes, 2.0, True)
    assert level == {'concurrency': 2, 'requests': 5, 'completed': 2, 'errors': 1, 'output_tokens': 10,
                     'wall_s': 2.0, 'output_tok_s': 5.0, 'ttft_p50_s': 0.3, 'ttft_p95_s': pytest.approx(0.39),
                     'itl_p50_s': 0.2, 'itl_p95_s': pytest.approx(0.27), 'timed_out': True, 'first_error': 'HTTP 503'}


def test_a_level_with_nothing_streamed_has_no_latencies_and_no_throughput():
    level = summarize_level(1, 3, [outcome(error='refused', completed=False)] * 3, 0.0, False)
    assert (level['errors'], level['completed'], level['output_tokens'], level['output_tok_s']) == (3, 0, 0, 0.0)
    assert [level[key] for key in ('ttft_p50_s', 'ttft_p95_s', 'itl_p50_s', 'itl_p95_s')] == [None] * 4


@pytest.mark.parametrize('line, expected', [
    (b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n',
     ('chunk', {'text': 'a', 'meta_info': {'completion_tokens': 1}})),
    (b'data: [DONE]\n', ('done', None)),
    (b'\n', (None, None)),
    (b': a comment\n', (None, None)),
    (b'data: not json\n', ('chunk', {'error': {'message': 'an event that is not JSON: not JSON (Expecting value: '
                                                           'line 1 column 1 (char 0))'}})),
    (b'data: [1]\n', ('chunk', {'error': {'message': 'an event that is not an object'}})),
])
def test_event_lines_as_sglang_writes_them(line, expected):
    assert parse_event(line) == expected


# SGLang's exporter shape (prometheus_client text, labelled {model_name=...} as upstream's production-metrics docs show it).
METRICS_TEXT = '''# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="meta-llama/Llama-3.1-8B-Instruct"} 412.5
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.75
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 16.0
'''


@pytest.mark.parametrize('text, expected', [
    (METRICS_TEXT, {'gen_throughput': 412.5, 'spec_accept_length': 2.75}),
    ('sglang:gen_throughput 10\n', {'gen_throughput': 10.0, 'spec_accept_length': None}),
    # One sample per DP rank: the throughputs add up, the acceptance lengths average.
    ('sglang:gen_throughput{dp_rank="0"} 100\nsglang:gen_throughput{dp_rank="1"} 50\n'
     'sglang:spec_accept_length{dp_rank="0"} 2\nsglang:spec_accept_length{dp_rank="1"} 3\n',
     {'gen_throughput': 150.0, 'spec_accept_length': 2.5}),
    # A name that only starts like one, a sample with a timestamp, a broken value.
    ('sglang:gen_throughput_total 9\nsglang:gen_throughput{a="b c"} 7 1700000000000\n'
     'sglang:spec_accept_length{a="b"} NaNx\n', {'gen_throughput': 7.0, 'spec_accept_length': None}),
    ('', {'gen_throughput': None, 'spec_accept_length': None}),
])
def test_metrics_read_from_prometheus_text(text, expected):
    assert parse_metrics(text) == expected


def test_the_request_is_fixed_length_greedy_and_streamed():
    assert json.loads(generate_body('Hello', 32)) == {
        'text': 'Hello', 'stream': True, 'sampling_params': {'max_new_tokens': 32, 'ignore_eos': True, 'temperature': 0}}


def sse(tokens, finish=True, done=True):
    """An event stream as SGLang writes it: cumulative text and completion_tokens, finish_reason at the end."""
    events = []
    for count in range(1, tokens + 1):
        last = finish and count == tokens
        events.append('data: %s\n\n' % json.dumps({'text': ' t' * count, 'meta_info': {
            'id': 'r1', 'prompt_tokens': 1, 'completion_tokens': count,
            'finish_reason': {'type': 'length', 'length': tokens} if last else None}}))
    return ''.join(events) + ('data: [DONE]\n\n' if done else '')


def test_streams_are_parsed_counted_and_sent_with_the_api_key(http_responder):
    http_responder.route('POST', '/generate', body=sse(4), headers={'Content-Type': 'text/event-stream'})
    http_responder.route('GET', '/metrics', body=METRICS_TEXT, headers={'Content-Type': 'text/plain'})
    progress = []
    result = run_benchmark(http_responder.url + '/', [1, 3], 6, 4, 'Hello', 30, api_key='k',
                           on_progress=lambda: progress.append(1))
    assert [(lvl['concurrency'], lvl['requests'], lvl['completed'], lvl['errors'], lvl['output_tokens'],
             lvl['timed_out']) for lvl in result['levels']] == [(1, 6, 6, 0, 24, False), (3, 6, 6, 0, 24, False)]
    assert all(lvl['ttft_p50_s'] is not None and lvl['itl_p95_s'] is not None for lvl in result['levels'])
    assert all(lvl['output_tok_s'] > 0 for lvl in result['levels'])
    assert result['metrics'] == {'gen_throughput': 412.5, 'spec_accept_length': 2.75}
    generates = http_responder.requests_to('POST', '/generate')
    assert len(generates) == 12
    assert {r.headers['Authorization'] for r in http_responder.requests} == {'Bearer k'}
    assert generates[0].json['stream'] is True and generates[0].json['sampling_params']['max_new_tokens'] == 4
    assert len(progress) >= 2  # at least once a level


def chunked(text, size=7):
    """text in HTTP/1.1 chunked transfer encoding, as uvicorn streams SGLang's events (chunks cut mid-line)."""
    data = text.encode()
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    return b''.join(b'%x\r\n%s\r\n' % (len(part), part) for part in parts) + b'0\r\n\r\n'


@pytest.mark.parametrize('checks, refused_before, generates, metrics_read', [
    # The port is the server's before every level and /metrics: the whole run.
    ([None, None, None], None, 4, 1),
    # The server died after the first level and left its port: no more requests, no key.
    ([None, 'port P is held by PID 7'], 'concurrency 3', 2, 0),
    # ... or during the last level: /metrics (keyed) is not read.
    ([None, None, 'nothing listens at U'], 'the /metrics read', 4, 0),
], ids=['ours-throughout', 'gone-between-levels', 'gone-before-metrics'])
def test_the_listener_is_checked_before_each_level_and_the_metrics_read(http_responder, checks, refused_before,
                                                                        generates, metrics_read):
    http_responder.route('POST', '/generate', body=sse(2))
    http_responder.route('GET', '/metrics', body=METRICS_TEXT)
    answers = iter(checks)
    if refused_before is None:
        result = run_benchmark(http_responder.url, [1, 3], 2, 2, 'x', 30, api_key='k',
                               listener_check=lambda: next(answers))
        assert [lvl['completed'] for lvl in result['levels']] == [2, 2] and result['metrics'] is not None
    else:
        with pytest.raises(ListenerRefused) as refused:
            run_benchmark(http_responder.url, [1, 3], 2, 2, 'x', 30, api_key='k', listener_check=lambda: next(answers))
        assert str(refused.value) == 'before %s, nothing sent: %s' % (refused_before, checks[-1])
    assert next(answers, 'no check left') == 'no check left'
    assert len(http_responder.requests_to('POST', '/generate')) == generates
    assert len(http_responder.requests_to('GET', '/metrics')) == metrics_read


def test_a_chunked_stream_is_read_through_its_transfer_encoding(http_responder):
    http_responder.route('POST', '/generate', body=chunked(sse(5)),
                         headers={'Content-Type': 'text/event-stream', 'Transfer-Encoding': 'chunked'})
    level = run_benchmark(http_responder.url, [2], 4, 5, 'x', 30, read_metrics=False)['levels'][0]
    assert (level['completed'], level['errors'], level['output_tokens']) == (4, 0, 20)


@pytest.mark.parametrize('reply, expected_error_free', [
    (Reply(status=503, json={'error': {'message': 'the server is shutting down'}}), False),
    (Reply(status=401, json={'error': 'Unauthorized'}), False),
    (Reply(body='data: {"error": {"message": "boom"}}\n\ndata: [DONE]\n\n'), False),
    (Reply(body=sse(3, finish=False)), False),  # ended without a finish reason
    (Reply(body=sse(3, done=False)), True),  # the finish reason is what counts, [DONE] may be lost
])
def test_a_server_that_refuses_counts_errors(http_responder, reply, expected_error_free):
    http_responder.route('POST', '/generate', replies=[reply])
    result = run_benchmark(http_responder.url, [2], 4, 3, 'x', 30, read_metrics=False)
    level = result['levels'][0]
    assert (level['errors'], level['completed']) == ((0, 4) if expected_error_free else (4, 0))
    assert level['timed_out'] is False
    assert result['metrics'] is None


def test_a_closed_port_counts_errors_and_metrics_none():
    result = run_benchmark(closed_port_url(), [1, 4], 3, 8, 'x', 30)
    assert [(lvl['errors'], lvl['completed'], lvl['output_tokens']) for lvl in result['levels']] == [(3, 0, 0)] * 2
    assert result['metrics'] is None


def test_a_url_of_another_scheme_counts_errors_and_is_never_spoken_as_plain_http():
    result = run_benchmark('ftp://127.0.0.1:1', [1], 2, 8, 'x', 30)
    assert [(lvl['errors'], lvl['completed']) for lvl in result['levels']] == [(2, 0)]
    assert result['metrics'] is None


def test_a_server_without_metrics_is_measured_from_outside_alone(http_responder):
    http_responder.route('POST', '/generate', body=sse(2))  # /metrics: the responder's 404
    result = run_benchmark(http_responder.url, [1], 2, 2, 'x', 30)
    assert result['levels'][0]['completed'] == 2
    assert result['metrics'] is None


def test_a_level_that_runs_out_of_time_stops_and_says_so(http_responder):
    # The server holds every request far longer than the level's bound (the fixture frees it at the end).
    http_responder.route('POST', '/generate', body=sse(2), delay=120)
    started = time.monotonic()
    result = run_benchmark(http_responder.url, [2, 1], 50, 2, 'x', 1.0, read_metrics=False)
    assert time.monotonic() - started < 60  # bounded by the levels' 1 s each, not by the server's 120 s
    assert [(lvl['timed_out'], lvl['completed'], lvl['errors']) for lvl in result['levels']] == [(True, 0, 0)] * 2


# --- a broken or hostile server: every request counted, every level ended by its timeout, memory capped ---

def test_nested_brackets_in_an_event_are_an_error_event_not_a_recursion_error():
    kind, chunk = parse_event(b'data: ' + b'[' * 200000 + b'\n')
    assert (kind, chunk) == ('chunk', {'error': {'message': 'an event that is not JSON: JSON nested deeper than 64 levels'}})


@pytest.mark.parametrize('event, said', [
    ({'text': 'a', 'meta_info': ['not', 'an', 'object']}, 'an event whose meta_info is not an object'),
    ({'text': 'a', 'meta_info': {'completion_tokens': [1]}}, 'an event whose completion_tokens is not a count: [1]'),
    ({'text': 'a', 'meta_info': {'completion_tokens': '2'}}, "an event whose completion_tokens is not a count: '2'"),
    ({'text': 'a', 'meta_info': {'completion_tokens': 99, 'finish_reason': None}},
     'the server streamed 99 tokens, more than the 3 asked'),
])
def test_an_event_that_is_not_sglangs_counts_every_request_as_an_error(http_responder, event, said):
    # Such an event once raised out of a worker thread: its request was never counted, the level looked clean.
    http_responder.route('POST', '/generate', body='data: %s\n\n' % json.dumps(event))
    level = run_benchmark(http_responder.url, [2], 4, 3, 'x', 30, read_metrics=False)['levels'][0]
    assert (level['errors'], level['completed'], level['timed_out'], level['first_error']) == (4, 0, False, said)


def test_a_request_whose_reading_raises_anything_is_still_counted(http_responder, monkeypatch):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _serving_benchmark

    def broken(*args):
        raise KeyError('meta_info')
    monkeypatch.setattr(_serving_benchmark, 'stream_request', broken)
    level = run_benchmark(http_responder.url, [3], 5, 3, 'x', 30, read_metrics=False)['levels'][0]
    assert (level['requests'], level['errors'], level['first_error']) == (5, 5, "KeyError: 'meta_info'")


def test_an_endless_event_stream_is_cut_at_the_levels_timeout(hostile_http):
    server = hostile_http(endless_events())
    started = time.monotonic()
    level = run_benchmark(server.url, [2], 4, 3, 'x', 2.0, read_metrics=False)['levels'][0]
    assert time.monotonic() - started < 3 * 2.0
    # Two requests in flight, each streamed its one token again and again until the level's end cut it.
    assert (level['timed_out'], level['completed'], level['errors'], level['output_tokens']) == (True, 0, 0, 2)


def test_a_trickling_server_is_cut_at_the_levels_timeout(hostile_http):
    server = hostile_http(trickle())
    started = time.monotonic()
    level = run_benchmark(server.url, [1], 3, 3, 'x', 2.0, read_metrics=False)['levels'][0]
    assert time.monotonic() - started < 3 * 2.0
    assert (level['timed_out'], level['completed'], level['errors']) == (True, 0, 0)


def test_an_event_line_without_end_stops_at_the_line_cap(hostile_http):
    server = hostile_http(endless_line())
    level = run_benchmark(server.url, [1], 2, 3, 'x', 30, read_metrics=False)['levels'][0]
    assert (level['errors'], level['completed'], level['timed_out']) == (2, 0, False)
    assert level['first_error'] == 'a line of the answer is longer than the 1048576-byte cap'
    assert server.client_went_away.wait(10)


def test_metrics_over_their_cap_are_no_metrics(hostile_http):
    server = hostile_http(huge_length())
    assert read_metrics_from(server.url, 5) is None


@pytest.mark.parametrize('text, series', [
    ('sglang:gen_throughput{model_name="m"} NaN\n', 'sglang:gen_throughput{model_name="m"} reads nan'),
    ('sglang:gen_throughput 10\nsglang:spec_accept_length{dp_rank="1"} 1e309\n',
     'sglang:spec_accept_length{dp_rank="1"} reads inf'),
])
def test_a_gauge_that_is_not_a_finite_number_is_refused_naming_it(text, series):
    with pytest.raises(LiveMetricsError, match=re.escape(series)):
        parse_metrics(text)


def test_metrics_holding_a_nan_are_no_metrics(http_responder):
    http_responder.route('GET', '/metrics', replies=[Reply(body='sglang:gen_throughput{model_name="m"} NaN\n')])
    assert read_metrics_from(http_responder.url, 5) is None
