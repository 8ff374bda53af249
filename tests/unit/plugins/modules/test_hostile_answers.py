"""sglang_router_worker and sglang_benchmark, through their main(), against a hostile or broken peer on loopback
(tests/helpers/hostile_http.py): each ends by a bound its own timeouts give, with a failure or figures that say
what the peer did, and reads no further than a cap.

The bounds asserted are three times the configured timeouts: what is under test is that the run ends because
of them (before, a trickling router held the module past 40 s), not how fast it ends.
"""
import json
import time

import pytest

from helpers.hostile_http import (  # noqa: F401  (hostile_http: the fixture)
    by_request, endless_events, endless_line, hostile_http, huge_length, listing, nested_brackets, raw, trickle,
    trickle_body)
from helpers.module_runner import run_module  # noqa: F401  (the fixture)
from ansible_collections.gpuops.sglang.plugins.modules import sglang_benchmark, sglang_router_worker

WORKER = 'http://127.0.0.1:30001'
# Short bounds: what is under test is that the bound ends the run, not its default (a trickle of one byte
# every 0.5 s still outlives any per-read timeout of 1 s).
REQUEST_TIMEOUT = 1
BENCHMARK_TIMEOUT = 1.5


def no_commands(argv):
    raise AssertionError('the module ran a command: %r' % argv)


def run_timed(run_module, main, args):
    begun = time.monotonic()
    result, dummy = run_module(main, args, no_commands)
    return result, time.monotonic() - begun


def router_args(server, **extra):
    args = dict(router_url=server.url, worker_url=WORKER, timeout=5, request_timeout=REQUEST_TIMEOUT)
    args.update(extra)
    return args


@pytest.mark.parametrize('state', ['present', 'absent', 'query'])
@pytest.mark.parametrize('behaviour, said', [
    (trickle(), 'answered nothing: no complete answer within 1s (timed out reading the status line)'),
    (trickle_body(), 'answered nothing: no complete answer within 1s (timed out reading the body)'),
    (nested_brackets(), 'answered an unexpected body: JSON nested deeper than 64 levels'),
    (endless_line(b'application/json', b'{"workers": "'), 'answered nothing: the answer is longer than the '
                                                         '1048576-byte cap'),
    (huge_length(), 'answered nothing: the answer is 10737418240 bytes (Content-Length), over the 1048576-byte cap'),
], ids=['trickled-head', 'trickled-body', 'nested-brackets', 'endless-body', 'huge-length'])
def test_a_hostile_router_fails_the_module_within_its_request_timeout(run_module, hostile_http, state, behaviour,
                                                                      said):
    server = hostile_http(behaviour)
    result, took = run_timed(run_module, sglang_router_worker.main, router_args(server, state=state))
    assert result['failed'] and result['changed'] is False
    assert result['msg'] == 'sglang_router_worker %s of %s at %s failed: GET %s/workers %s' % (
        state, WORKER, server.url, server.url, said)
    assert result['member_before'] is None and result['member'] is None
    assert took < 3 * REQUEST_TIMEOUT


def test_a_router_that_trickles_its_answer_to_the_removal_fails_within_its_request_timeout(run_module,
                                                                                          hostile_http):
    server = hostile_http(by_request([('GET /workers', listing({'workers': [
        {'id': 'w-0', 'url': WORKER, 'is_healthy': True, 'load': 0}]}))], otherwise=trickle()))
    result, took = run_timed(run_module, sglang_router_worker.main, router_args(server, state='absent'))
    assert result['failed'] and result['member_before'] is True and result['member'] is None
    assert result['msg'].endswith('DELETE /workers/w-0 (%s) answered nothing: no complete answer within 1s '
                                  '(timed out reading the status line)' % WORKER)
    assert result['requests'] == ['GET /workers -> 200', 'DELETE /workers/w-0 -> no answer']
    assert took < 3 * 2 * REQUEST_TIMEOUT


def benchmark_args(server, **extra):
    args = dict(url=server.url, levels=[1, 2], requests=2, max_new_tokens=4, timeout=BENCHMARK_TIMEOUT,
                read_metrics=False)
    args.update(extra)
    return args


@pytest.mark.parametrize('behaviour', [endless_events(), trickle(), trickle_body()],
                         ids=['endless-events', 'trickled-head', 'trickled-body'])
def test_a_server_that_never_finishes_its_answer_is_cut_at_each_levels_timeout(run_module, hostile_http,
                                                                               behaviour):
    server = hostile_http(behaviour)
    result, took = run_timed(run_module, sglang_benchmark.main, benchmark_args(server))
    assert not result['failed'] and result['measured'] is True
    assert [(level['timed_out'], level['completed'], level['errors']) for level in result['levels']] == [
        (True, 0, 0), (True, 0, 0)]
    assert result['msg'].count('(timed out)') == 2
    assert took < 3 * 2 * BENCHMARK_TIMEOUT


@pytest.mark.parametrize('behaviour, said', [
    (endless_line(), 'a line of the answer is longer than the 1048576-byte cap'),
    (raw(b'HTTP/1.1 200 OK\r\n\r\ndata: ' + b'[' * 200000 + b'\n\n'),
     "the server answered an error: {'message': 'an event that is not JSON: JSON nested deeper than 64 levels'}"),
    (raw(b'HTTP/1.1 200 OK\r\n\r\ndata: %s\n\n' % json.dumps({'meta_info': 'x'}).encode()),
     'an event whose meta_info is not an object'),
], ids=['endless-line', 'nested-brackets', 'meta-info-not-an-object'])
def test_an_answer_over_a_cap_or_not_sglangs_counts_every_request_as_an_error(run_module, hostile_http, behaviour,
                                                                              said):
    server = hostile_http(behaviour)
    result, took = run_timed(run_module, sglang_benchmark.main, benchmark_args(server))
    assert not result['failed']
    assert [(level['errors'], level['completed'], level['timed_out'], level['first_error'])
            for level in result['levels']] == [(2, 0, False, said)] * 2
    assert result['msg'] == 'measured %s: %s' % (server.url, ', '.join(
        'concurrency %d: 0.0 output tok/s, 2 error(s) (first: %s)' % (level, said) for level in (1, 2)))
    assert took < 3 * 2 * BENCHMARK_TIMEOUT
