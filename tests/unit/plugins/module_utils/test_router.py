import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils._router import (
    RouterError, in_router, normalize_url, ready, workers_from_listing)
from ansible_collections.gpuops.sglang.plugins.module_utils._server import in_flight_from_loads
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
