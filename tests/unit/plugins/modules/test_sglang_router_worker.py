"""sglang_router_worker's main() against a responder that imitates sglang-router 0.3.2's worker API.

GET /workers lists {"id", "url", "is_healthy"}; DELETE /workers/{id} and POST /workers answer 202 and take
effect in the background, which the imitation shows by listing the old membership for `lag` more reads
(tests/helpers/http_responder.py's RouterImitation).
"""
import pytest

from helpers.http_responder import Reply, RouterImitation, closed_port_url, http_responder  # noqa: F401
from helpers.module_runner import run_module  # noqa: F401  (the fixture)
from ansible_collections.gpuops.sglang.plugins.modules import sglang_router_worker

KEYS = {'changed', 'member_before', 'member', 'healthy', 'worker_id', 'workers_total', 'elapsed', 'requests'}
WORKER = 'http://127.0.0.1:30001'
OTHER = 'http://127.0.0.1:30002'


def no_commands(argv):
    raise AssertionError('sglang_router_worker ran a command: %r' % argv)


def args(router, **extra):
    base = dict(router_url=router.responder.url, worker_url=WORKER, timeout=5, request_timeout=2)
    base.update(extra)
    return base


@pytest.mark.parametrize('state, listed, changed, member, changes', [
    ('query', [WORKER, OTHER], False, True, []),
    ('query', [OTHER], False, False, []),
    ('present', [WORKER], False, True, []),
    ('present', [OTHER], True, True, ['POST /workers']),
    ('absent', [WORKER, OTHER], True, False, ['DELETE /workers/w-0']),
    ('absent', [OTHER], False, False, []),
])
def test_each_state_changes_the_router_only_when_the_membership_differs(run_module, http_responder, state, listed,
                                                                       changed, member, changes):
    router = RouterImitation(http_responder, listed)
    result, _ = run_module(sglang_router_worker.main, args(router, state=state), no_commands)
    assert not result['failed'], result.get('msg')
    assert result['changed'] is changed and result['member'] is member
    assert result['member_before'] is (WORKER in listed)
    assert [call for call in router.calls() if not call.startswith('GET')] == changes
    assert (WORKER in router.urls()) is member
    assert set(result) >= KEYS
    assert result['requests'][0] == 'GET /workers -> 200'


@pytest.mark.parametrize('state, listed', [('present', [OTHER]), ('absent', [WORKER])])
def test_a_second_run_changes_nothing(run_module, http_responder, state, listed):
    router = RouterImitation(http_responder, listed)
    first, _ = run_module(sglang_router_worker.main, args(router, state=state), no_commands)
    assert not first['failed'] and first['changed'] is True
    before = len(http_responder.requests)
    again, _ = run_module(sglang_router_worker.main, args(router, state=state), no_commands)
    assert not again['failed'] and again['changed'] is False
    assert again['member_before'] is again['member'] is (state == 'present')
    assert [request.method for request in http_responder.requests[before:]] == ['GET']
    assert set(again) == set(first)


@pytest.mark.parametrize('state, listed, member', [('present', [OTHER], True), ('absent', [WORKER], False)])
def test_check_mode_says_what_would_change_and_changes_nothing(run_module, http_responder, state, listed, member):
    router = RouterImitation(http_responder, listed)
    result, _ = run_module(sglang_router_worker.main, args(router, state=state), no_commands, check_mode=True,
                           diff=True)
    assert not result['failed'] and result['changed'] is True and result['member'] is member
    assert router.calls() == ['GET /workers']
    assert (WORKER in router.urls()) is not member
    assert result['diff'] == {'before': {'member': not member}, 'after': {'member': member}}


def test_present_waits_until_the_router_lists_the_new_worker_as_healthy(run_module, http_responder):
    router = RouterImitation(http_responder, [OTHER], lag=1, unhealthy_reads=1)
    result, _ = run_module(sglang_router_worker.main, args(router, state='present'), no_commands)
    assert not result['failed'], result.get('msg')
    assert result['healthy'] is True and result['worker_id'] == 'w-new' and result['workers_total'] == 2
    # One read before the addition shows, one listing it unhealthy, then the one listing it healthy.
    assert router.calls() == ['GET /workers', 'POST /workers'] + ['GET /workers'] * 3
    assert http_responder.requests_to('POST', '/workers')[0].json == {'url': WORKER}


def test_a_listed_but_unhealthy_worker_is_waited_for_without_adding_it_again(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER])
    router.workers[0].update(is_healthy=False, unhealthy_reads=1)
    result, _ = run_module(sglang_router_worker.main, args(router, state='present'), no_commands)
    assert not result['failed'], result.get('msg')
    assert result['changed'] is False and result['healthy'] is True
    assert http_responder.requests_to('POST') == []


def test_a_worker_that_never_becomes_healthy_fails_naming_the_router_and_the_worker(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER])
    router.workers[0]['is_healthy'] = False
    result, _ = run_module(sglang_router_worker.main, args(router, state='present', timeout=0.3), no_commands)
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'] == ('sglang_router_worker present of %s at %s failed: the router %s lists %s but not as '
                             'healthy within 0.3s' % (WORKER, router.responder.url, router.responder.url, WORKER))
    assert result['member'] is True and result['healthy'] is False


def test_absent_waits_for_the_asynchronous_removal(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER, OTHER], lag=1)
    result, _ = run_module(sglang_router_worker.main, args(router, state='absent'), no_commands)
    assert not result['failed'], result.get('msg')
    assert router.calls() == ['GET /workers', 'DELETE /workers/w-0'] + ['GET /workers'] * 2
    assert result['member'] is False and result['worker_id'] is None and result['workers_total'] == 1


def test_a_router_that_keeps_listing_a_removed_worker_fails_as_still_routing_to_it(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER], lag=10 ** 6)
    result, _ = run_module(sglang_router_worker.main, args(router, state='absent', timeout=0.3), no_commands)
    assert result['failed'] and set(result) >= KEYS
    assert 'still lists %s 0.3s after DELETE /workers/w-0: it may still send it requests' % WORKER in result['msg']
    assert result['member'] is True and result['member_before'] is True


@pytest.mark.parametrize('state', ['query', 'present', 'absent'])
def test_an_unreachable_router_fails_with_the_membership_unknown(run_module, state):
    router_url = closed_port_url()
    result, _ = run_module(sglang_router_worker.main, dict(router_url=router_url, worker_url=WORKER, state=state,
                                                           timeout=1, request_timeout=1), no_commands)
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'].startswith('sglang_router_worker %s of %s at %s failed: GET %s/workers answered nothing'
                                    % (state, WORKER, router_url, router_url))
    assert result['member_before'] is None and result['member'] is None and result['changed'] is False
    assert result['requests'] == ['GET /workers -> no answer']


def test_a_router_slower_than_request_timeout_counts_as_no_answer(run_module, http_responder):
    http_responder.route('GET', '/workers', json={'workers': []}, delay=60)
    result, _ = run_module(sglang_router_worker.main, dict(router_url=http_responder.url, worker_url=WORKER,
                                                           state='query', request_timeout=0.2), no_commands)
    assert result['failed'] and 'answered nothing' in result['msg']


@pytest.mark.parametrize('reply, said', [
    (Reply(500, body='gateway exploded'), 'GET %s/workers answered 500: gateway exploded'),
    (Reply(200, body='<html>not json</html>'), 'GET %s/workers answered an unexpected body'),
    (Reply(200, json={'total': 0}), 'GET /workers answered without a "workers" list'),
])
def test_a_listing_the_module_cannot_read_is_a_clear_failure(run_module, http_responder, reply, said):
    http_responder.route('GET', '/workers', replies=[reply])
    result, _ = run_module(sglang_router_worker.main, dict(router_url=http_responder.url, worker_url=WORKER,
                                                           state='present'), no_commands)
    assert result['failed'] and set(result) >= KEYS
    assert (said % http_responder.url if '%s' in said else said) in result['msg']
    assert http_responder.requests_to('POST') == []


def test_a_refused_addition_fails_with_the_routers_answer(run_module, http_responder):
    RouterImitation(http_responder, [OTHER])
    http_responder.route('POST', '/workers', status=400, body='invalid url')
    result, _ = run_module(sglang_router_worker.main, dict(router_url=http_responder.url, worker_url=WORKER,
                                                           state='present'), no_commands)
    assert result['failed'] and set(result) >= KEYS
    assert 'POST /workers {"url": "%s"} answered 400: invalid url' % WORKER in result['msg']
    # Nothing was read after the refused change: the membership is unknown, not a guess.
    assert result['member'] is None and result['member_before'] is False


def test_the_routers_api_key_goes_as_a_bearer_token_on_every_request(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER], api_key='router-key')
    result, _ = run_module(sglang_router_worker.main, args(router, state='absent', api_key='router-key'),
                           no_commands)
    assert not result['failed'], result.get('msg')
    assert {request.headers.get('Authorization') for request in http_responder.requests} == {'Bearer router-key'}
    assert 'DELETE /workers/w-0' in router.calls()
    assert 'router-key' not in repr(result)


def test_without_the_routers_api_key_a_keyed_router_refuses_and_no_header_is_sent(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER], api_key='router-key')
    result, _ = run_module(sglang_router_worker.main, args(router, state='absent'), no_commands)
    assert result['failed'] and 'GET %s/workers answered 401' % http_responder.url in result['msg']
    assert 'Authorization' not in http_responder.requests[0].headers
    assert router.urls() == [WORKER]


def test_the_workers_own_key_is_handed_to_the_router_and_never_returned(run_module, http_responder):
    router = RouterImitation(http_responder, [])
    result, _ = run_module(sglang_router_worker.main, args(router, state='present', worker_api_key='worker-key'),
                           no_commands)
    assert not result['failed'], result.get('msg')
    assert http_responder.requests_to('POST', '/workers')[0].json == {'url': WORKER, 'api_key': 'worker-key'}
    assert 'worker-key' not in repr(result)


def test_the_worker_url_is_matched_whatever_its_trailing_slash(run_module, http_responder):
    router = RouterImitation(http_responder, [WORKER])
    result, _ = run_module(sglang_router_worker.main, args(router, state='present', worker_url=WORKER + '/'),
                           no_commands)
    assert not result['failed'] and result['changed'] is False and result['worker_id'] == 'w-0'


class SmgImitation(RouterImitation):
    """The worker API as smg 1.13.0 answers it (tests/fixtures/smg-1.13.0-workers*.json, recorded on loopback).

    Every entry has a status. DELETE marks the worker draining (is_healthy false) at once and drops it from the
    listing `settle_reads` reads later (smg's drain settle time); POST for a URL it still lists answers 409; an
    added worker is listed once ready. A worker given `not_ready_reads` is listed not_ready that many reads.
    """

    def __init__(self, responder, workers=(), settle_reads=2):
        super(SmgImitation, self).__init__(responder, workers)
        for worker in self.workers:
            worker.update(status='ready', not_ready_reads=0)
        self.settle_reads = settle_reads

    def listing(self, request, match):
        super(SmgImitation, self).listing(request, match)  # applies the changes now due; its answer lacks status
        for worker in self.workers:
            if worker['status'] == 'not_ready':
                if worker['not_ready_reads'] <= 0:
                    worker.update(status='ready', is_healthy=True)
                worker['not_ready_reads'] -= 1
        listed = [dict((key, worker[key]) for key in ('id', 'url', 'is_healthy', 'status', 'load'))
                  for worker in self.workers]
        return Reply(json={'workers': listed, 'total': len(listed)})

    def delete(self, request, match):
        wanted = match.group('id')
        worker = next((entry for entry in self.workers if entry['id'] == wanted), None)
        if worker is None:
            return Reply(404, json={'error': 'worker %s not found' % wanted})
        worker.update(status='draining', is_healthy=False)

        def remove():
            self.workers = [entry for entry in self.workers if entry['id'] != wanted]
        self.pending.append({'reads': self.settle_reads, 'apply': remove})
        return Reply(202, json={'status': 'accepted', 'worker_id': wanted})

    def add(self, request, match):
        url = request.json['url']
        if any(worker['url'] == url for worker in self.workers):
            return Reply(409, json={'error': "Worker already exists at URL '%s'" % url,
                                    'code': 'WORKER_ALREADY_EXISTS'})
        entry = dict(id='w-new', url=url, is_healthy=True, status='ready', load=0, not_ready_reads=0)
        self.pending.append({'reads': 0, 'apply': lambda: self.workers.append(entry)})
        return Reply(202, json={'status': 'accepted', 'worker_id': 'w-new'})

    def status_of(self, url):
        return next((worker['status'] for worker in self.workers if worker['url'] == url), None)


def test_absent_on_smg_is_done_once_the_worker_is_draining_without_waiting_for_its_settle_time(run_module,
                                                                                              http_responder):
    router = SmgImitation(http_responder, [WORKER, OTHER], settle_reads=10 ** 6)
    result, _ = run_module(sglang_router_worker.main, args(router, state='absent'), no_commands)
    assert not result['failed'], result.get('msg')
    assert result['changed'] is True and result['member_before'] is True and result['member'] is False
    assert router.calls() == ['GET /workers', 'DELETE /workers/w-0', 'GET /workers']
    # Still listed, sent nothing new: reported as out of the router, with the gateway's own word for it.
    assert router.status_of(WORKER) == 'draining'
    assert result['status'] == 'draining' and result['worker_id'] is None and result['healthy'] is None
    assert set(result) >= KEYS | {'status'}


@pytest.mark.parametrize('state, changed, member', [('absent', False, False), ('query', False, False),
                                                    ('present', True, True)])
def test_a_draining_worker_on_smg_is_not_in_the_router(run_module, http_responder, state, changed, member):
    router = SmgImitation(http_responder, [WORKER, OTHER], settle_reads=2)
    router.workers[0].update(status='draining', is_healthy=False)
    router.pending.append({'reads': 2, 'apply': lambda: router.workers.pop(0)})
    result, _ = run_module(sglang_router_worker.main, args(router, state=state), no_commands)
    assert not result['failed'], result.get('msg')
    assert result['member_before'] is False
    assert result['changed'] is changed and result['member'] is member
    assert http_responder.requests_to('DELETE') == []


def test_present_right_after_a_removal_on_smg_waits_until_the_draining_worker_is_dropped_then_adds_it(
        run_module, http_responder):
    router = SmgImitation(http_responder, [WORKER, OTHER], settle_reads=2)
    removed, _ = run_module(sglang_router_worker.main, args(router, state='absent'), no_commands)
    assert not removed['failed'] and router.status_of(WORKER) == 'draining'
    before = len(http_responder.requests)
    added, _ = run_module(sglang_router_worker.main, args(router, state='present'), no_commands)
    assert not added['failed'], added.get('msg')
    assert added['changed'] is True and added['member'] is True and added['status'] == 'ready'
    assert added['worker_id'] == 'w-new' and added['healthy'] is True
    calls = router.calls()[before:]
    # Listed draining (first read), dropped at the next, then one POST (no 409), then listed ready.
    assert calls == ['GET /workers', 'GET /workers', 'POST /workers', 'GET /workers']
    assert [request.method for request in http_responder.requests_to('POST')] == ['POST']


def test_a_worker_smg_keeps_draining_past_the_timeout_fails_saying_so(run_module, http_responder):
    router = SmgImitation(http_responder, [WORKER], settle_reads=10 ** 6)
    router.workers[0].update(status='draining', is_healthy=False)
    result, _ = run_module(sglang_router_worker.main, args(router, state='present', timeout=0.3), no_commands)
    assert result['failed'] and result['member'] is False and result['status'] == 'draining'
    assert ('the router %s still lists %s as draining 0.3s on: smg removes a worker only after its drain settle '
            'time (5 s)' % (router.responder.url, WORKER)) in result['msg']
    assert http_responder.requests_to('POST') == []


def test_a_worker_smg_lists_not_ready_is_waited_for_and_not_added_again(run_module, http_responder):
    router = SmgImitation(http_responder, [WORKER])
    router.workers[0].update(status='not_ready', is_healthy=False, not_ready_reads=2)
    result, _ = run_module(sglang_router_worker.main, args(router, state='present'), no_commands)
    assert not result['failed'], result.get('msg')
    assert result['changed'] is False and result['member'] is True and result['status'] == 'ready'
    assert result['healthy'] is True and result['worker_id'] == 'w-0'
    assert http_responder.requests_to('POST') == []
    assert router.calls().count('GET /workers') >= 3


def test_a_worker_smg_never_lists_ready_fails_with_its_status(run_module, http_responder):
    router = SmgImitation(http_responder, [WORKER])
    router.workers[0].update(status='not_ready', is_healthy=False, not_ready_reads=10 ** 6)
    result, _ = run_module(sglang_router_worker.main, args(router, state='present', timeout=0.3), no_commands)
    assert result['failed'] and result['member'] is True and result['status'] == 'not_ready'
    assert result['msg'].endswith('the router %s lists %s but as not_ready within 0.3s'
                                  % (router.responder.url, WORKER))
    assert http_responder.requests_to('POST') == []


# The router's spelling of a worker (issue 43): the gateway may list this server under another spelling than
# worker_url. `localhost` resolves to 127.0.0.1 everywhere (and maybe ::1 too); `.invalid` never resolves
# (RFC 6761), and a resolver that hangs on it is bounded by request_timeout, with the same answer.
BY_NAME = 'http://localhost:30001'
STALE = 'http://gone.invalid:30001'


@pytest.mark.parametrize('listed, worker_url, in_router_as', [
    # the same spelling: no lookup at all
    ([BY_NAME, OTHER], BY_NAME, BY_NAME),
    # the gateway registered the address, the inventory names the host; and the reverse
    ([WORKER, OTHER], BY_NAME, WORKER),
    ([BY_NAME, OTHER], WORKER, BY_NAME),
    # IPv6: two spellings of one address, and an IPv4-mapped IPv6 address for its IPv4 one
    (['http://[::1]:30001'], 'http://[0:0:0:0:0:0:0:1]:30001', 'http://[::1]:30001'),
    (['http://[::ffff:127.0.0.1]:30001'], BY_NAME, 'http://[::ffff:127.0.0.1]:30001'),
    # the scheme's own port, named or not
    (['http://127.0.0.1'], 'http://localhost:80', 'http://127.0.0.1'),
    # another port, scheme or address is another server: not listed, drained by an operator
    (['http://127.0.0.1:30002'], BY_NAME, None),
    (['https://127.0.0.1:30001'], BY_NAME, None),
    (['http://127.0.0.2:30001'], BY_NAME, None),
    # a stale name at another port cannot be this server: no refusal
    (['http://gone.invalid:30002', WORKER], BY_NAME, WORKER),
])
def test_the_router_is_read_by_what_the_worker_url_resolves_to(run_module, http_responder, listed, worker_url,
                                                               in_router_as):
    router = RouterImitation(http_responder, listed)
    result, _ = run_module(sglang_router_worker.main, args(router, state='query', worker_url=worker_url),
                           no_commands)
    assert not result['failed'], result.get('msg')
    assert result['worker_url_in_router'] == in_router_as
    assert result['member_before'] is result['member'] is (in_router_as is not None)
    assert set(result) >= KEYS | {'worker_url_in_router'}


def test_a_server_the_router_lists_by_address_is_taken_out_and_readmitted_under_that_spelling(run_module,
                                                                                             http_responder):
    router = RouterImitation(http_responder, [WORKER, OTHER])
    removed, _ = run_module(sglang_router_worker.main, args(router, state='absent', worker_url=BY_NAME), no_commands)
    assert not removed['failed'], removed.get('msg')
    assert removed['changed'] is True and removed['member'] is False and removed['worker_url_in_router'] == WORKER
    assert 'DELETE /workers/w-0' in router.calls() and router.urls() == [OTHER]
    # The role's later steps name the worker as the router did (worker_url_in_router), so it goes back as it was.
    added, _ = run_module(sglang_router_worker.main, args(router, state='present', worker_url=WORKER), no_commands)
    assert not added['failed'], added.get('msg')
    assert http_responder.requests_to('POST', '/workers')[0].json == {'url': WORKER}
    assert router.urls() == [WORKER, OTHER]


@pytest.mark.parametrize('state', ['query', 'absent', 'present'])
@pytest.mark.parametrize('listed, worker_url, said', [
    # a listed worker at this port whose name resolves nowhere: it may be this server
    ([STALE, OTHER], WORKER, 'it lists %s, whose host does not resolve here, and this server is %s (127.0.0.1)'
     % (STALE, WORKER)),
    # this server's own name resolves nowhere, and the router lists a worker at its port
    ([WORKER], STALE, '%s names no address here (gone.invalid does not resolve) and the router lists %s at the same '
     'port' % (STALE, WORKER)),
    # two entries are this server: draining one leaves the other routed
    ([WORKER, BY_NAME], 'http://[::ffff:127.0.0.1]:30001', 'the router lists this server (http://[::ffff:127.0.0.1]'
     ':30001) 2 times: %s, %s' % (WORKER, BY_NAME)),
])
def test_a_worker_that_cannot_be_told_apart_is_a_failure_naming_both_spellings_and_changes_nothing(
        run_module, http_responder, state, listed, worker_url, said):
    router = RouterImitation(http_responder, listed)
    result, _ = run_module(sglang_router_worker.main,
                           args(router, state=state, worker_url=worker_url, request_timeout=1), no_commands)
    assert result['failed'] and set(result) >= KEYS | {'worker_url_in_router'}
    assert result['msg'].startswith('sglang_router_worker %s of %s at %s failed: ' % (state, worker_url,
                                                                                     router.responder.url))
    assert said in result['msg']
    if 'times' not in said:
        assert "Set worker_url (the role's sglang_router_worker_url) to the router's spelling" in result['msg']
    assert result['member_before'] is None and result['member'] is None and result['changed'] is False
    assert result['worker_url_in_router'] is None
    assert router.calls() == ['GET /workers'] and router.urls() == sorted(listed)
