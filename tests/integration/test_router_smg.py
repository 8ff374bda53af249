"""sglang_router_worker through the SGLang project's gateway today, smg 1.13 (from the venv), on loopback.

The same module against the gateway the lab runs (test_router_drain.py drives sglang-router 0.3.2): smg marks
a removed worker draining at once and drops it after its drain settle time (5 s), refusing its URL meanwhile;
it lists a worker whose health checks fail as not_ready, then failed. Workers are tests/integration/files/tiny_server.py
run detached by sglang_server, as the role runs SGLang.
"""
import pytest

from helpers.ansible_run import run_task
from helpers.router import Router, http_json
from helpers.simulated import wait_for

ROUTER_KEYS = {'changed', 'member_before', 'member', 'healthy', 'worker_id', 'status', 'workers_total', 'requests'}


@pytest.fixture
def smg(tmp_path):
    started = Router(tmp_path, gateway='smg')
    yield started
    started.stop()


def listed(router):
    return dict((worker['url'], worker['status']) for worker in http_json('GET', router.url + '/workers')[1]['workers'])


def worker(tmp_path, router, server, name, **extra):
    args = dict(router_url=router.url, worker_url=server.url, timeout=20)
    args.update(extra)
    return run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', args, name=name)


@pytest.mark.slow
def test_a_worker_taken_out_of_smg_is_out_while_draining_and_readmitted_once_smg_dropped_it(tmp_path, smg, servers):
    server = servers('a')
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start').failed

    added = worker(tmp_path, smg, server, 'add')
    assert not added.failed, added['msg']
    assert added['changed'] is True and added['member'] is True and added['status'] == 'ready'
    assert set(added) >= ROUTER_KEYS
    assert http_json('POST', smg.url + '/generate', {'text': 'hi'})[0] == 200

    removed = worker(tmp_path, smg, server, 'remove', state='absent')
    assert not removed.failed, removed['msg']
    assert removed['changed'] is True and removed['member'] is False and removed['status'] == 'draining'
    # Out for new traffic, still listed: smg answers new requests without it (no other worker: 503).
    assert listed(smg) == {server.url: 'draining'}
    assert http_json('POST', smg.url + '/generate', {'text': 'hi'})[0] == 503
    again = worker(tmp_path, smg, server, 'remove-again', state='absent')
    assert not again.failed and again['changed'] is False and again['member_before'] is False

    # Right away, while smg still lists it draining: waited out, then added once (no 409 in the requests).
    back = worker(tmp_path, smg, server, 'readmit')
    assert not back.failed, back['msg']
    assert back['changed'] is True and back['member'] is True and back['status'] == 'ready'
    assert [request for request in back['requests'] if request.startswith('POST')] == ['POST /workers -> 202']
    assert listed(smg) == {server.url: 'ready'}
    assert http_json('POST', smg.url + '/generate', {'text': 'hi'})[0] == 200


@pytest.mark.slow
def test_a_stopped_worker_smg_lists_not_ready_is_not_readmitted_and_fails_with_its_status(tmp_path, smg, servers):
    server = servers('b')
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start').failed
    assert not worker(tmp_path, smg, server, 'add').failed
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop').failed
    # The case under test: smg has seen it fail its health checks (the module reads smg's view, not the server's).
    wait_for(lambda: listed(smg).get(server.url) in ('not_ready', 'failed'), 30, 'smg listing the stopped worker')

    present = worker(tmp_path, smg, server, 'present', timeout=4)
    assert present.failed
    # smg lists it not_ready after its first failed health check, failed after more of them.
    assert present['status'] in ('not_ready', 'failed'), present['status']
    assert present['msg'].endswith('lists %s but as %s within 4.0s' % (server.url, present['status'])), present['msg']
    assert present['member'] is True and present['changed'] is False
    assert not [request for request in present['requests'] if request.startswith('POST')]
