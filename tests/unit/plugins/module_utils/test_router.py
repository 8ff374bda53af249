import ipaddress
import json
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._router import (
    Router, RouterError, UnmatchedWorker, addresses_of, in_router, match_worker, normalize_url, ready,
    workers_from_listing)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import in_flight_from_loads
from helpers.hostile_http import (  # noqa: F401  (hostile_http: the fixture)
    endless_line, hostile_http, huge_length, nested_brackets, trickle, trickle_body)
from helpers.module_runner import read_fixture


def test_router_listing_gives_ids_urls_and_health():
    workers = workers_from_listing(read_fixture('router-0.3.2-workers.json').encode())
    assert workers == [
        {'id': '5c1d4c52-6d1b-4eb0-b81d-182ae9d6ec7a', 'url': 'http://127.0.0.1:39002', 'is_healthy': True,
         'status': None},
        {'id': '69247e81-495c-4337-8cd4-36bfa83cdf6f', 'url': 'http://127.0.0.1:39001', 'is_healthy': False,
         'status': None}]
    # sglang-router 0.3 gives no status: listed is in the router, and healthy is ready.
    assert [(in_router(worker), ready(worker)) for worker in workers] == [(True, True), (True, False)]


def test_smg_listing_gives_the_gateway_status_of_each_worker():
    serving = workers_from_listing(read_fixture('smg-1.13.0-workers.json').encode())
    assert serving == [{'id': '01a23317-f9ec-719a-a5ba-c5dd85dbc0bc', 'url': 'http://127.0.0.1:39101',
                        'is_healthy': True, 'status': 'ready'}]
    assert in_router(serving[0]) and ready(serving[0])


def test_smg_draining_worker_is_out_of_the_router_and_a_not_ready_one_in_it_but_not_ready():
    workers = workers_from_listing(read_fixture('smg-1.13.0-workers-draining-not-ready.json').encode())
    by_status = dict((worker['status'], worker) for worker in workers)
    assert sorted(by_status) == ['draining', 'not_ready']
    # Removed a moment ago: still listed for smg's settle time, but sent nothing new.
    assert not in_router(by_status['draining']) and not ready(by_status['draining'])
    # Its server stopped: listed, in the router, not ready (not to be added again, only waited for).
    assert in_router(by_status['not_ready']) and not ready(by_status['not_ready'])


def test_a_worker_not_listed_is_neither_in_the_router_nor_ready():
    assert not in_router(None) and not ready(None)


def test_bare_url_listings_of_older_routers_are_read_too():
    assert workers_from_listing(b'["http://10.0.0.1:30000/"]') == [
        {'id': None, 'url': 'http://10.0.0.1:30000', 'is_healthy': None, 'status': None}]


def test_a_listing_without_workers_is_an_error_not_an_empty_fleet():
    with pytest.raises(RouterError, match='without a "workers" list'):
        workers_from_listing(b'{"error": "unauthorized"}')


def test_urls_compare_without_trailing_slash_or_spaces():
    assert normalize_url(' http://10.0.0.1:30000/ ') == 'http://10.0.0.1:30000'


def test_in_flight_counts_running_and_waiting_from_both_load_endpoints():
    assert in_flight_from_loads('/v1/loads', read_fixture('sglang-0.5.12-v1-loads.json').encode()) == 5
    assert in_flight_from_loads('/get_load', read_fixture('sglang-0.5.12-get-load.json').encode()) == 5


# --- a hostile or hung router: every call ends within its request timeout as a RouterError ---

@pytest.mark.parametrize('behaviour, said', [
    (nested_brackets(), 'GET %s/workers answered an unexpected body: JSON nested deeper than 64 levels'),
    (trickle(), 'GET %s/workers answered nothing: no complete answer within 1s (timed out reading the status line)'),
    (trickle_body(), 'GET %s/workers answered nothing: no complete answer within 1s (timed out reading the body)'),
    (huge_length(), 'GET %s/workers answered nothing: the answer is 10737418240 bytes (Content-Length), over the '
                    '1048576-byte cap'),
    (endless_line(b'application/json', b'{"workers": "'),
     'GET %s/workers answered nothing: the answer is longer than the 1048576-byte cap'),
], ids=['nested-brackets', 'trickled-head', 'trickled-body', 'huge-length', 'endless-body'])
def test_a_hostile_router_is_a_router_error_within_the_request_timeout(hostile_http, behaviour, said):
    server = hostile_http(behaviour)
    router = Router(server.url, request_timeout=1.0)
    begun = time.monotonic()
    with pytest.raises(RouterError) as raised:
        router.workers()
    assert str(raised.value) == said % server.url
    assert time.monotonic() - begun < 3 * 1.0


def test_taking_a_worker_out_of_a_trickling_router_ends_by_its_timeouts(hostile_http):
    # The guard's watcher takes the server out of the router on its own: a router that trickles its answer
    # must cost it a failed step, not the rest of its deadline.
    server = hostile_http(trickle())
    begun = time.monotonic()
    with pytest.raises(RouterError, match='no complete answer within 1s'):
        Router(server.url, request_timeout=1.0).take_out('http://127.0.0.1:1', timeout=2)
    assert time.monotonic() - begun < 3 * (2 + 1.0)


# match_worker with the names' addresses given (a resolver's answer of this machine cannot be chosen): the router's
# spelling of this server, whatever the inventory's (issue 43). test_sglang_router_worker.py runs the same through
# the module against a router on 127.0.0.1 with this machine's resolver.
HOSTS = {'gpu1': {'10.0.0.11', 'fd00::11'}, 'gpu1-v6': {'fd00::11'}, 'gpu2': {'10.0.0.12'}}


def given_addresses(host, port):
    if host in HOSTS:
        return frozenset(ipaddress.ip_address(address) for address in HOSTS[host])
    try:
        return frozenset([ipaddress.ip_address(host)])
    except ValueError:
        return None  # names no address: does not resolve


@pytest.mark.parametrize('listed, url, found', [
    (['http://gpu1:30000'], 'http://gpu1:30000', 'http://gpu1:30000'),
    (['http://10.0.0.12:30000', 'http://10.0.0.11:30000'], 'http://gpu1:30000', 'http://10.0.0.11:30000'),
    (['http://gpu1:30000'], 'http://10.0.0.11:30000', 'http://gpu1:30000'),
    # a name with IPv4 and IPv6 addresses: the router may hold either
    (['http://[fd00::11]:30000'], 'http://gpu1:30000', 'http://[fd00::11]:30000'),
    (['http://gpu1-v6:30000'], 'http://gpu1:30000', 'http://gpu1-v6:30000'),
    (['http://[fd00:0::11]:30000/'], 'http://[fd00::11]:30000', 'http://[fd00:0::11]:30000'),
    (['http://gpu1:30001', 'https://gpu1:30000', 'http://gpu2:30000'], 'http://10.0.0.11:30000', None),
    ([], 'http://gpu1:30000', None),
    # a name that does not resolve at another port is another server whatever it is
    (['http://stale:30001'], 'http://gpu1:30000', None),
])
def test_the_router_lists_this_server_under_any_spelling_of_its_address_and_port(listed, url, found):
    workers = workers_from_listing(json.dumps({'workers': [{'id': str(n), 'url': u} for n, u in enumerate(listed)]}))
    entry = match_worker(workers, url, given_addresses)
    assert (entry['url'] if entry else None) == found


@pytest.mark.parametrize('listed, url, said', [
    (['http://stale:30000'], 'http://gpu1:30000', 'it lists http://stale:30000, whose host does not resolve here, '
     'and this server is http://gpu1:30000 (10.0.0.11, fd00::11)'),
    (['http://10.0.0.11:30000'], 'http://stale:30000', 'http://stale:30000 names no address here (stale does not '
     'resolve) and the router lists http://10.0.0.11:30000 at the same port'),
    (['http://gpu1:30000', 'http://10.0.0.11:30000', 'http://[fd00::11]:30000'], 'http://gpu1-v6:30000',
     'the router lists this server (http://gpu1-v6:30000) 2 times: http://gpu1:30000, http://[fd00::11]:30000'),
])
def test_a_worker_that_cannot_be_told_apart_from_this_server_is_an_unmatched_worker(listed, url, said):
    workers = workers_from_listing(json.dumps({'workers': [{'id': str(n), 'url': u} for n, u in enumerate(listed)]}))
    with pytest.raises(UnmatchedWorker) as raised:
        match_worker(workers, url, given_addresses)
    assert said in str(raised.value)
    assert isinstance(raised.value, RouterError)


def test_a_stale_name_beside_this_servers_own_entry_does_not_stop_the_run():
    workers = workers_from_listing(json.dumps({'workers': [{'url': 'http://stale:30000'},
                                                           {'url': 'http://10.0.0.11:30000'}]}))
    assert match_worker(workers, 'http://gpu1:30000', given_addresses)['url'] == 'http://10.0.0.11:30000'


def test_a_name_is_looked_up_to_every_address_it_has_and_a_missing_one_to_none():
    assert addresses_of('127.0.0.1', 80, 1) == frozenset([ipaddress.ip_address('127.0.0.1')])
    assert addresses_of('::ffff:127.0.0.1', 80, 1) == frozenset([ipaddress.ip_address('127.0.0.1')])
    assert ipaddress.ip_address('127.0.0.1') in addresses_of('localhost', 80, 5)
    assert addresses_of('gone.invalid', 80, 5) is None
