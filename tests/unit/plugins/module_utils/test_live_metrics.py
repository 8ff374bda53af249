"""The reader of a server's live /metrics: Prometheus text in SGLang's names, summed over labels, differenced."""
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _live_metrics

SCRAPE = '''# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m, {odd} \\"name\\"",is_streaming="true"} 10.0
sglang:num_requests_total{model_name="m",is_streaming="false"} 5.0
sglang:num_aborted_requests_total{model_name="m"} 1.0
sglang:generation_tokens_total{model_name="m",is_streaming="true"} 160.0 1700000000000
sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="0",le="0.01"} 3.0
sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="0",le="0.02"} 7.0
sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="0",le="+Inf"} 8.0
sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="1",le="0.01"} 1.0
sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="1",le="0.02"} 1.0
sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="1",le="+Inf"} 2.0
sglang:inter_token_latency_seconds_sum{model_name="m",tp_rank="0"} 0.1
sglang:inter_token_latency_seconds_count{model_name="m",tp_rank="0"} 8.0
sglang:inter_token_latency_seconds_sum{model_name="m",tp_rank="1"} 0.02
sglang:inter_token_latency_seconds_count{model_name="m",tp_rank="1"} 2.0
sglang:gen_throughput{model_name="m"} 412.0
a broken line {
sglang:num_requests_total{model_name="unterminated} 99
'''


def test_a_scrape_sums_every_label_set():
    figures = _live_metrics.snapshot(SCRAPE)
    assert (figures['requests'], figures['aborted'], figures['tokens']) == (15.0, 1.0, 160.0)
    assert figures['itl'] == {'bounds': [0.01, 0.02, math.inf], 'counts': [4.0, 4.0, 2.0], 'sum': pytest.approx(0.12)}
    assert figures['ttft'] is None and figures['e2e'] is None


def test_a_sum_that_misses_a_label_sets_samples_is_not_believed():
    # tp_rank 1's _sum and _count are gone: 0.1 s is the total of 8 of the 10 samples, no mean of all 10.
    partial = '\n'.join(line for line in SCRAPE.splitlines() if not ('tp_rank="1"' in line and '_bucket' not in line))
    figures = _live_metrics.snapshot(partial)
    assert figures['itl']['counts'] == [4.0, 4.0, 2.0] and figures['itl']['sum'] is None


def test_a_server_without_live_figures_has_none():
    figures = _live_metrics.snapshot('sglang:gen_throughput{model_name="m"} 1.0\n')
    assert all(value is None for value in figures.values())


def test_the_difference_is_what_was_served_between_the_scrapes():
    before = _live_metrics.snapshot(SCRAPE)
    after = _live_metrics.snapshot(SCRAPE.replace('} 10.0', '} 30.0').replace('le="+Inf"} 8.0', 'le="+Inf"} 18.0')
                                   .replace('tp_rank="0"} 0.1', 'tp_rank="0"} 1.1').replace('} 8.0\n', '} 18.0\n'))
    served = _live_metrics.difference(before, after)
    assert served['requests'] == 20.0 and served['aborted'] == 0.0
    assert served['itl']['counts'] == [0.0, 0.0, 10.0] and served['itl']['sum'] == pytest.approx(1.0)


@pytest.mark.parametrize('change, message', [
    (('} 10.0', '} 2.0'), 'sglang:num_requests_total went down between the scrapes: the server restarted'),
    (('le="+Inf"} 8.0', 'le="+Inf"} 1.0'), 'sglang:inter_token_latency_seconds went down'),
    (('le="0.02"} 7.0', 'le="0.03"} 7.0'), 'sglang:inter_token_latency_seconds changed its buckets'),
])
def test_a_restart_between_the_scrapes_is_refused_not_guessed(change, message):
    before = _live_metrics.snapshot(SCRAPE)
    with pytest.raises(_live_metrics.LiveMetricsError, match=message.replace('(', r'\(')):
        _live_metrics.difference(before, _live_metrics.snapshot(SCRAPE.replace(*change)))


def test_a_histogram_without_its_inf_bucket_is_refused():
    with pytest.raises(_live_metrics.LiveMetricsError, match=r'\+Inf'):
        _live_metrics.snapshot('sglang:e2e_request_latency_seconds_bucket{le="1"} 3\n')


def test_jsonable_writes_inf_as_a_string():
    figures = _live_metrics.jsonable(_live_metrics.snapshot(SCRAPE))
    assert figures['itl']['bounds'][-1] == '+Inf'


@pytest.fixture
def metrics_server():
    answers = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = answers['now']
            self.send_response(status)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    server = HTTPServer(('127.0.0.1', 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield answers, 'http://127.0.0.1:%d' % server.server_port
    server.shutdown()
    server.server_close()


def test_a_scrape_over_http(metrics_server):
    answers, url = metrics_server
    answers['now'] = (200, SCRAPE.encode())
    assert _live_metrics.scrape(url, 5)['requests'] == 15.0
    answers['now'] = (404, b'not found')
    assert _live_metrics.scrape(url, 5) is None
    answers['now'] = (500, b'oops')
    with pytest.raises(_live_metrics.LiveMetricsError, match='answered 500'):
        _live_metrics.scrape(url, 5)
    answers['now'] = (200, b'\xff\xfe')
    with pytest.raises(_live_metrics.LiveMetricsError, match='not UTF-8'):
        _live_metrics.scrape(url, 5)
    with pytest.raises(_live_metrics.LiveMetricsError, match='did not answer'):
        _live_metrics.scrape('http://127.0.0.1:9', 2)


def test_a_series_that_appears_between_the_scrapes_counts_from_zero():
    served = _live_metrics.difference(_live_metrics.snapshot(''), _live_metrics.snapshot(SCRAPE))
    assert served['requests'] == 15.0 and served['itl']['counts'] == [4.0, 4.0, 2.0]
    assert _live_metrics.difference(_live_metrics.snapshot(SCRAPE), _live_metrics.snapshot(''))['requests'] is None


@pytest.mark.parametrize('line, series', [
    # float() takes every one of these; each would turn a check of the verdict off.
    ('sglang:num_requests_total{model_name="m"} NaN', 'sglang:num_requests_total{model_name="m"} reads nan'),
    ('sglang:num_aborted_requests_total{model_name="m"} +Inf', 'sglang:num_aborted_requests_total{model_name="m"} reads inf'),
    ('sglang:generation_tokens_total 1e309', 'sglang:generation_tokens_total{} reads inf'),
    ('sglang:inter_token_latency_seconds_bucket{model_name="m",tp_rank="0",le="0.01"} NaN',
     'sglang:inter_token_latency_seconds_bucket{le="0.01",model_name="m",tp_rank="0"} reads nan'),
    ('sglang:inter_token_latency_seconds_sum{model_name="m",tp_rank="0"} -Inf',
     'sglang:inter_token_latency_seconds_sum{model_name="m",tp_rank="0"} reads -inf'),
    ('sglang:e2e_request_latency_seconds_count nan', 'sglang:e2e_request_latency_seconds_count{} reads nan'),
], ids=['nan-counter', 'inf-counter', 'overflowing-counter', 'nan-bucket', 'infinite-sum', 'nan-count'])
def test_a_sample_that_is_not_a_finite_number_is_refused_naming_its_series(line, series):
    with pytest.raises(_live_metrics.LiveMetricsError) as refused:
        _live_metrics.snapshot(SCRAPE + line + '\n')
    assert str(refused.value).startswith(series + ', not a finite number')


@pytest.mark.parametrize('line', [
    'sglang:gen_throughput{model_name="m"} NaN',  # a gauge of SGLang's that the bake does not read
    'process_cpu_seconds_total +Inf',
    'sglang:num_requests_total{model_name="m"} NaNx',  # not a number at all: not a sample, as before
])
def test_a_series_the_bake_does_not_read_may_hold_anything(line):
    assert _live_metrics.snapshot(SCRAPE + line + '\n')['requests'] == 15.0


TWO_RANKS = '%s{model_name="m",tp_rank="0"%s} 1e308\n%s{model_name="m",tp_rank="1"%s} 1e308\n'


@pytest.mark.parametrize('series, le, message', [
    ('sglang:num_requests_total', '', 'sglang:num_requests_total sums over its label sets to inf'),
    ('sglang:e2e_request_latency_seconds_bucket', ',le="+Inf"',
     'sglang:e2e_request_latency_seconds_bucket{le="+Inf"} sums over its label sets to inf'),
    ('sglang:inter_token_latency_seconds_sum', '', 'sglang:inter_token_latency_seconds_sum sums over its label sets'
                                                  ' to inf'),
    ('sglang:inter_token_latency_seconds_count', '', 'sglang:inter_token_latency_seconds_count sums over its label'
                                                    ' sets to inf'),
], ids=['counter', 'bucket', 'sum', 'count'])
def test_finite_samples_whose_sum_leaves_a_floats_range_are_refused_naming_the_series(series, le, message):
    # Each of two ranks exports 1e308, a finite number; their sum is infinity, and infinity less infinity NaN.
    with pytest.raises(_live_metrics.LiveMetricsError) as refused:
        _live_metrics.snapshot(SCRAPE + TWO_RANKS % (series, le, series, le))
    assert str(refused.value) == message + ', not a finite number: the reading is refused (a broken exporter, or not' \
                                           ' SGLang answering there; look at its /metrics)'


@pytest.mark.parametrize('before, after, message', [
    ('sglang:num_requests_total -1e308\n', 'sglang:num_requests_total 1e308\n',
     'sglang:num_requests_total grew between the scrapes to inf, not a finite number'),
    ('sglang:e2e_request_latency_seconds_bucket{le="+Inf"} 1\nsglang:e2e_request_latency_seconds_sum -1e308\n'
     'sglang:e2e_request_latency_seconds_count 1\n',
     'sglang:e2e_request_latency_seconds_bucket{le="+Inf"} 2\nsglang:e2e_request_latency_seconds_sum 1e308\n'
     'sglang:e2e_request_latency_seconds_count 2\n',
     'sglang:e2e_request_latency_seconds_sum grew between the scrapes to inf, not a finite number'),
], ids=['counter', 'sum'])
def test_a_difference_of_finite_readings_that_leaves_a_floats_range_is_refused(before, after, message):
    with pytest.raises(_live_metrics.LiveMetricsError) as refused:
        _live_metrics.difference(_live_metrics.snapshot(before), _live_metrics.snapshot(after))
    assert str(refused.value).startswith(message)


def test_a_difference_of_bucket_counts_that_leaves_a_floats_range_is_refused():
    # A snapshot's counts lie within [0, the largest float]; one handed over from elsewhere may not.
    after = _live_metrics.snapshot('sglang:e2e_request_latency_seconds_bucket{le="+Inf"} 1e308\n')
    before = dict(after, e2e={'bounds': [math.inf], 'counts': [-1e308], 'sum': None})
    with pytest.raises(_live_metrics.LiveMetricsError,
                       match='^sglang:e2e_request_latency_seconds grew between the scrapes to inf, not a finite number'):
        _live_metrics.difference(before, after)


@pytest.mark.parametrize('figures', [
    {'requests': math.nan}, {'aborted': math.inf},
    {'itl': {'bounds': [0.01, math.inf], 'counts': [1.0, math.nan], 'sum': 0.1}},
    {'itl': {'bounds': [0.01, math.inf], 'counts': [1.0, 1.0], 'sum': math.nan}},
], ids=['nan-counter', 'inf-counter', 'nan-count', 'nan-sum'])
def test_jsonable_never_writes_a_number_json_cannot_carry(figures):
    read = dict(_live_metrics.snapshot(SCRAPE), **figures)
    with pytest.raises(_live_metrics.LiveMetricsError, match='came to (nan|inf), not a finite number'):
        _live_metrics.jsonable(read)
