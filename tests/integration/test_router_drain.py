"""Drain and readmit through the real SGLang router (sglang-router 0.3.2, from the venv), on loopback.

sglang_router_worker against the router's real worker API; sglang_server's drain (wait for the requests
already routed to a server) and readiness checks (consecutive /health_generate, one real generation)
against tests/integration/files/tiny_server.py run detached, as the role runs SGLang.
"""
import json
import os
import subprocess
import threading
import urllib.request

import pytest

from helpers.ansible_run import run_task, run_tasks
from helpers.router import http_json
from helpers.simulated import free_port, wait_for
from helpers.tiny import alive

ROUTER_KEYS = {'changed', 'member_before', 'member', 'healthy', 'worker_id', 'workers_total', 'elapsed', 'requests'}


def worker_args(router, server, **extra):
    args = dict(router_url=router.url, worker_url=server.url + '/', timeout=20)
    args.update(extra)
    return args


@pytest.mark.slow
def test_remove_and_readmit_with_check_mode_diff_and_idempotent_reruns(tmp_path, router, servers):
    server = servers('a')
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start').failed

    query = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server, state='query'),
                     name='query')
    assert not query.failed and query['changed'] is False and set(query) >= ROUTER_KEYS
    assert query['member_before'] is False and query['member'] is False and query['workers_total'] == 0

    check = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server), check=True,
                     diff=True, name='check')
    assert check['changed'] is True and check['diff'] == {'before': {'member': False}, 'after': {'member': True}}
    assert router.urls() == []

    added = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server), name='add')
    assert not added.failed, added['msg']
    assert added['changed'] is True and added['member'] is True and added['healthy'] is True and added['worker_id']
    assert router.urls() == [server.url]
    assert http_json('POST', router.url + '/generate', {'text': 'hi'})[0] == 200

    again = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server), name='again')
    assert again['changed'] is False and again['member'] is True and again['requests'] == ['GET /workers -> 200']

    removed = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server, state='absent'),
                       name='remove')
    assert not removed.failed and removed['changed'] is True and removed['member'] is False
    assert removed['requests'][1].startswith('DELETE /workers/%s -> 202' % added['worker_id'])
    assert router.urls() == []
    gone = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server, state='absent'),
                    name='gone')
    assert gone['changed'] is False


@pytest.mark.slow
def test_a_router_that_does_not_answer_fails_clearly(tmp_path, servers):
    server = servers('a')
    result = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker',
                      dict(router_url='http://127.0.0.1:%d' % free_port(), worker_url=server.url, state='absent'))
    assert result.failed and set(result) >= ROUTER_KEYS
    assert 'GET http://127.0.0.1:' in result['msg'] and '/workers answered nothing' in result['msg']
    assert result['changed'] is False


@pytest.mark.slow
def test_stop_waits_for_the_requests_already_routed_to_the_server(tmp_path, router, servers):
    hold, loads_log = tmp_path / 'hold', tmp_path / 'loads.log'
    server = servers('a', '--hold-file', str(hold), '--loads-log', str(loads_log))
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed
    run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server), name='add')
    hold.write_text('')
    answers = []
    # Held on purpose until the stop has seen it: its own timeout is not what is tested, and must outlast the hold.
    client = threading.Thread(target=lambda: answers.append(http_json('POST', router.url + '/generate', {'text': 'x'},
                                                                      timeout=300)))
    client.start()
    wait_for(lambda: http_json('GET', server.url + '/v1/loads')[1]['aggregate']['total_reqs'] == 1, what='a request in flight')
    run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, server, state='absent'), name='out')

    loads_log.write_text('')
    results = []
    stop = threading.Thread(target=lambda: results.append(run_task(
        tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped', drain_timeout=60), name='stop')))
    stop.start()
    # The module has seen the request in flight: now let it finish.
    wait_for(lambda: loads_log.read_text().strip(), timeout=60, what='the drain reading the load')
    assert alive(started['pid'])
    hold.unlink()
    stop.join()
    client.join()
    stopped = results[0]
    assert not stopped.failed, stopped['msg']
    drain = stopped['drain']
    assert drain['idle'] is True and drain['in_flight_at_start'] == 1 and drain['in_flight_at_end'] == 0
    assert drain['source'] == '/v1/loads' and drain['why'] is None
    assert answers[0][0] == 200 and answers[0][1]['text'] == ' pong'
    assert not alive(started['pid'])


@pytest.mark.slow
def test_a_drain_past_its_deadline_stops_anyway_and_says_so(tmp_path, servers):
    hold = tmp_path / 'hold'
    hold.write_text('')
    server = servers('a', '--hold-file', str(hold))
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed
    client = threading.Thread(target=http_json, args=('POST', server.url + '/generate', {'text': 'x'}))
    client.start()
    wait_for(lambda: http_json('GET', server.url + '/get_load')[1][0]['num_reqs'] == 1, what='a request in flight')
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       server.args(state='stopped', drain_timeout=0.5, term_timeout=1), name='stop')
    client.join()
    assert not stopped.failed and stopped['running'] is False
    assert stopped['drain']['idle'] is False and stopped['drain']['in_flight_at_end'] == 1
    assert stopped['drain']['why'] == '1 request(s) still in flight after 0.5s'
    assert any('requests possibly in flight' in warning for warning in stopped['warnings'])
    assert not alive(started['pid'])


@pytest.mark.slow
def test_a_server_without_load_endpoints_is_stopped_without_waiting_out_the_drain(tmp_path, servers):
    server = servers('old', '--no-loads')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed
    # A drain it could never see end would otherwise hold the stop for all of drain_timeout.
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       server.args(state='stopped', drain_timeout=120, term_timeout=5), name='stop')
    assert not stopped.failed and stopped['running'] is False
    assert stopped['drain']['idle'] is False and stopped['drain']['source'] is None
    assert 'neither /v1/loads nor /get_load exists' in stopped['drain']['why']
    assert stopped['drain']['waited_s'] < 60  # not the 120 s of drain_timeout
    assert any('requests possibly in flight' in warning for warning in stopped['warnings'])
    assert not alive(started['pid'])


@pytest.mark.slow
def test_readiness_needs_consecutive_health_generates_and_a_real_generation(tmp_path, servers):
    good = servers('good')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       good.args(state='started', ready_checks=3, generate_probe=True), name='good')
    assert not started.failed, started['msg']
    readiness = started['readiness']
    assert readiness['ready'] is True and readiness['path'] == '/health_generate' and readiness['attempts'] == 3
    assert readiness['generate']['ok'] is True and readiness['generate']['status'] == 200

    broken = servers('broken', '--broken-generate')
    failed = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                      broken.args(state='started', ready_checks=2, generate_probe=True), name='broken')
    assert failed.failed and failed['healthy'] is True
    assert failed['msg'] == 'the server tiny is healthy but not ready: POST /generate answered 500'


@pytest.mark.slow
def test_fleet_slots_bound_unavailable_servers_counting_those_already_down(tmp_path, router, servers):
    up, pre_drained = servers('up'), servers('pre-drained')
    for server in (up, pre_drained):
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start').failed
    run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', worker_args(router, up), name='add')
    down = 'http://127.0.0.1:%d' % free_port()
    folder = str(tmp_path / 'slots')
    peers = {'h1': up.url, 'h2': up.url, 'h3': down}

    def task(name, host, state='acquired', **extra):
        args = dict(state=state, host=host, folder=folder, max_unavailable=1, peers=peers, wait_timeout=1)
        args.update(extra)
        return {'name': name, 'gpuops.sglang.sglang_fleet_slot': args, 'ignore_errors': True}

    results = run_tasks(tmp_path, [
        # h3 is down already: taking h1 down too would make two unavailable
        task('h1 with h3 down', 'h1'),
        task('h1 with room for two', 'h1', max_unavailable=2),
        # one slot taken by h1 (in its window) and h3 down: h2 must wait, then fail
        task('h2 over budget', 'h2', max_unavailable=2),
        # a server that is down already costs nothing: h3 may go
        task('h3 already down', 'h3', max_unavailable=2),
        task('release h1', 'h1', state='released'),
        task('release h3', 'h3', state='released'),
        task('h2 after the releases', 'h2', max_unavailable=2),
        task('release h2', 'h2', state='released'),
        # healthy but not in the router: out of service as far as clients go
        task('with the router', 'h1', peers={'h1': up.url, 'h4': pre_drained.url}, router_url=router.url),
    ], name='slots')

    refused = results['h1 with h3 down']
    assert refused.failed and refused['slot'] is False
    assert refused['msg'].startswith('taking h1 down would make 2 server(s) unavailable, more than max_unavailable 1: '
                                     'h3 (/health answered nothing); waited 1.0s')
    assert results['h1 with room for two']['slot'] is True
    waiting = results['h2 over budget']
    assert waiting.failed and 'h1 (in its window), h3 (/health answered nothing)' in waiting['msg']
    assert waiting['held_by'] == ['h1'] and waiting['waited_s'] >= 1
    assert results['h3 already down']['slot'] is True
    assert results['release h1']['changed'] is True and results['release h3']['changed'] is True
    assert results['h2 after the releases']['slot'] is True and results['h2 after the releases']['held_by'] == []
    routed = results['with the router']
    assert routed.failed and routed['unavailable'] == [{'host': 'h4', 'why': 'not in the router'}]
    assert os.listdir(folder) == ['.lock']


@pytest.mark.slow
def test_a_slot_left_by_a_run_that_died_does_not_count(tmp_path, servers):
    up = servers('up')
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', up.args(state='started'), name='start').failed
    folder = tmp_path / 'slots'
    folder.mkdir()
    dead = subprocess.Popen(['true'])
    dead.wait()
    (folder / 'h2.json').write_text(json.dumps({'host': 'h2', 'pid': dead.pid, 'pid_start': '1', 'since': 0}))
    result = run_task(tmp_path, 'gpuops.sglang.sglang_fleet_slot',
                      dict(host='h1', folder=str(folder), max_unavailable=1, peers={'h1': up.url, 'h2': up.url},
                           wait_timeout=1))
    assert not result.failed, result['msg']
    assert result['slot'] is True and result['held_by'] == []
