"""What GET /api/hosts does with servers that lie, stall or point elsewhere (issue 41), through the real API: the
app served by uvicorn on 127.0.0.1, an inventory of hosts on loopback ports, each a scripted or hostile HTTP peer
(tests/helpers/http_responder.py, hostile_http.py). Without the lab.

The dashboard never sends a server's API key (on the controller it cannot tell the server from a local user who
bound its port while it was down): a keyed server's card shows what its last report says the run verified on the
host. It follows no redirect, uses no proxy, and reads every host within one bound; one host's bad answer marks
that host's card only.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.request
from urllib.parse import urlsplit

import pytest
import yaml

from gpuops_dashboard import inventory as host_inventory
from helpers.hostile_http import HostileServer, nested_brackets, trickle
from helpers.http_responder import HttpResponder

API_KEY = 'the-api-key-7f3a'
# What a squatter on a keyed server's port answers: never to be shown as the server's settings.
SQUATTED = {'speculative_algorithm': 'SQUATTED', 'max_running_requests': 1}
# What the last run verified on the host (the report's verified_settings, as plugin_utils/_report.py writes them).
VERIFIED = {'server_info': {'model_path': '/models/m', 'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3,
                            'speculative_eagle_topk': 1, 'speculative_num_draft_tokens': 4,
                            'max_running_requests': 96},
            'environment': {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '24'}}
SHOWN = {'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3, 'speculative_eagle_topk': 1,
         'speculative_num_draft_tokens': 4, 'max_running_requests': 96, 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '24'}
# Generous: the behaviour under test is "answers within its bound", not how fast.
ANSWER_BOUND_S = 3 * host_inventory.READ_BOUND_S


def port_of(url):
    return int(url.rsplit(':', 1)[1])


def write_inventory(folder, hosts, report_dir):
    """An inventory of hosts at 127.0.0.1:PORT (the role asks a server listening on every address there)."""
    os.makedirs(folder)
    entries = {name: dict(variables, ansible_host='127.0.0.1', sglang_host='0.0.0.0', sglang_model_path='/m',
                          sglang_report_dir=report_dir) for name, variables in hosts.items()}
    with open(os.path.join(folder, 'hosts.yml'), 'w') as handle:
        yaml.safe_dump({'all': {'children': {'gpu': {'hosts': entries}}}}, handle)
    return folder


def write_report(report_dir, host, status='unchanged', verified=None):
    os.makedirs(report_dir, exist_ok=True)
    with open(os.path.join(report_dir, '%s.json' % host), 'w') as handle:
        json.dump({'host': host, 'status': status, 'healthy': True, 'reason': 'nothing to change',
                   'patch_sha256': '', 'verified_settings': verified}, handle)


def hosts_view(url, timeout=ANSWER_BOUND_S):
    """(status, body, seconds) of GET /api/hosts, straight to the dashboard (never a proxy); status None when no
    answer came within `timeout`."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    begun = time.monotonic()
    try:
        connection.request('GET', '/api/hosts')
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if response.status == 200 else body, time.monotonic() - begun
    except socket.timeout:
        return None, None, time.monotonic() - begun
    finally:
        connection.close()


def cards_of(view):
    status, body, dummy = view
    assert status == 200, 'GET /api/hosts answered %s: %r' % (status, body)
    return {card['name']: card for card in body['hosts']}


def served_for(serve, tmp_path_factory, hosts, reports=()):
    """The dashboard over an inventory of `hosts`, with the report files `reports` ((host, status, verified));
    the inventory resolved before anything is timed."""
    base = tmp_path_factory.mktemp('host-reads')
    report_dir = str(base / 'reports')
    for host, status, verified in reports:
        write_report(report_dir, host, status, verified)
    served = serve(inventory=write_inventory(str(base / 'inventory'), hosts, report_dir))
    served.app.state.dashboard.directory.hosts()
    return served


@pytest.fixture(scope='module')
def fleet(serve, tmp_path_factory):
    """One read of a fleet where every kind of bad server sits beside a good one."""
    recorder, keyed, keyless, unauthorized, redirecting, redirecting_keyed = (
        HttpResponder().start() for dummy in range(6))
    brackets, trickler = HostileServer(nested_brackets()), HostileServer(trickle())
    try:
        recorder.route('GET', '/health', status=200)
        recorder.route('GET', '/server_info', json=SQUATTED)
        # A keyed server's port, answered by whoever holds it: it would take the key and say anything.
        keyed.route('GET', '/health', status=200)
        keyed.route('GET', '/server_info', json=SQUATTED)
        keyless.route('GET', '/health', status=200)
        keyless.route('GET', '/server_info', json={'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 2,
                                                   'max_running_requests': 48, 'internal_states': [{'pid': 4242}]})
        unauthorized.route('GET', '/health', status=200)
        unauthorized.route('GET', '/server_info', status=401, json={'error': 'unauthorized'})
        for server in (redirecting, redirecting_keyed):
            for path in ('/health', '/server_info'):
                server.route('GET', path, status=302, headers={'Location': recorder.url + path})
        hosts = {'keyed': {'sglang_port': port_of(keyed.url), 'sglang_api_key': API_KEY},
                 'keyless': {'sglang_port': port_of(keyless.url)},
                 'unauthorized': {'sglang_port': port_of(unauthorized.url)},
                 'redirecting': {'sglang_port': port_of(redirecting.url)},
                 'redirecting-keyed': {'sglang_port': port_of(redirecting_keyed.url), 'sglang_api_key': API_KEY},
                 'vaulted': {'sglang_port': port_of(keyed.url), 'sglang_api_key': '{{ vault_missing }}'},
                 'brackets': {'sglang_port': port_of(brackets.url)},
                 'trickler': {'sglang_port': port_of(trickler.url)}}
        served = served_for(serve, tmp_path_factory, hosts, reports=[
            ('keyed', 'unchanged', VERIFIED), ('unauthorized', 'redeployed', VERIFIED),
            ('vaulted', 'rolled_back', None)])
        yield {'url': served.url, 'view': hosts_view(served.url), 'recorder': recorder, 'keyed': keyed,
               'keyless': keyless, 'redirecting': redirecting, 'redirecting_keyed': redirecting_keyed}
    finally:
        for server in (recorder, keyed, keyless, unauthorized, redirecting, redirecting_keyed):
            server.stop()
        for server in (brackets, trickler):
            server.stop()


def test_the_hosts_answer_comes_within_its_bound_while_a_server_trickles(fleet):
    status, dummy, took = fleet['view']
    assert status == 200 and took < ANSWER_BOUND_S
    trickler = cards_of(fleet['view'])['trickler']
    assert not trickler['healthy'] and trickler['health'].startswith('no answer: no complete answer within')
    assert trickler['settings'] is None and trickler['settings_error'] == 'not asked: /health had no answer'


def test_a_nested_answer_marks_only_its_own_hosts_card(fleet):
    cards = cards_of(fleet['view'])
    assert cards['brackets']['healthy'] and cards['brackets']['settings'] is None
    assert cards['brackets']['settings_error'] == ('/server_info could not be read: JSON nested deeper than 64 '
                                                   'levels')
    assert cards['keyless']['settings'] == {'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 2,
                                            'max_running_requests': 48}
    assert cards['keyless']['pid'] == 4242 and cards['keyless']['settings_source'] is None


def test_a_redirect_is_not_followed_and_no_key_reaches_its_target(fleet):
    cards = cards_of(fleet['view'])
    assert fleet['recorder'].requests == []
    assert cards['redirecting']['health'] == 302 and not cards['redirecting']['healthy']
    assert cards['redirecting']['settings'] is None
    assert cards['redirecting']['settings_error'] == '/server_info answered 302'
    assert cards['redirecting-keyed']['health'] == 302


def test_a_keyed_server_is_never_sent_its_key_and_its_card_shows_what_the_last_run_verified(fleet):
    cards = cards_of(fleet['view'])
    sent = [request for server in ('keyed', 'redirecting_keyed', 'recorder') for request in fleet[server].requests]
    assert sent and not [request for request in sent if 'Authorization' in request.headers]
    # Not even asked: whatever holds the port could answer anything.
    assert fleet['keyed'].requests_to('GET', '/server_info') == []
    keyed = cards['keyed']
    assert keyed['has_api_key'] and keyed['settings'] == SHOWN
    report_time = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(keyed['last_report']['_mtime']))
    assert keyed['settings_source'] == ('as the last run verified them on the host (its report of %s), not asked now: '
                                        'the server has an API key, which the dashboard never sends' % report_time)
    assert 'SQUATTED' not in json.dumps(cards) and API_KEY not in json.dumps(cards)


def test_a_server_that_answers_401_shows_its_reported_settings_saying_why(fleet):
    card = cards_of(fleet['view'])['unauthorized']
    assert card['settings'] == SHOWN and not card['has_api_key']
    assert card['settings_source'].endswith('not asked now: /server_info answered 401: the server has an API key the '
                                            'inventory does not give, and the dashboard never sends one')


def test_a_key_the_dashboard_cannot_resolve_is_a_key_and_a_report_without_verified_settings_says_so(fleet):
    card = cards_of(fleet['view'])['vaulted']
    assert card['has_api_key'] and card['settings'] is None and card['settings_source'] is None
    assert card['settings_error'].startswith('not asked (the server has an API key, which the dashboard never sends), '
                                             'and the last report (')
    assert card['settings_error'].endswith(', rolled_back) verified none')


def test_the_servers_are_asked_directly_never_through_a_proxy(serve, tmp_path_factory, monkeypatch):
    with HttpResponder() as proxy, HttpResponder() as server:
        proxy.route('GET', '/health', status=200)
        server.route('GET', '/health', status=200)
        server.route('GET', '/server_info', json={'max_running_requests': 64})
        served = served_for(serve, tmp_path_factory, {'gpu1': {'sglang_port': port_of(server.url)}})
        for name in ('http_proxy', 'HTTP_PROXY', 'all_proxy', 'ALL_PROXY'):
            monkeypatch.setenv(name, proxy.url)
        for name in ('no_proxy', 'NO_PROXY'):
            monkeypatch.delenv(name, raising=False)
        # A fresh process's urllib would read the proxy from the environment; this one's cached opener is dropped.
        monkeypatch.setattr(urllib.request, '_opener', None)
        card = cards_of(hosts_view(served.url))['gpu1']
    assert proxy.requests == []
    assert card['healthy'] and card['settings'] == {'max_running_requests': 64}
    assert [request.path for request in server.requests] == ['/health', '/server_info']


def test_views_of_a_stalling_fleet_leave_the_other_endpoints_their_threads(fleet, monkeypatch):
    # Starlette runs the plain endpoints (cancel, the history) on anyio's 40 worker threads: views of the hosts
    # must not hold them, however many come while a server stalls. The trickler holds each read for the whole
    # request timeout, so every view is still in flight when the history is asked.
    monkeypatch.setattr(host_inventory, 'REQUEST_TIMEOUT_S', 4.0)
    parts = urlsplit(fleet['url'])
    sent, views = [], []

    def view():
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=ANSWER_BOUND_S)
        try:
            connection.request('GET', '/api/hosts')
            sent.append(True)
            views.append(connection.getresponse().status)
        except OSError as error:
            views.append(error)
        finally:
            connection.close()
    viewers = [threading.Thread(target=view, daemon=True) for dummy in range(50)]
    for viewer in viewers:
        viewer.start()
    deadline = time.monotonic() + ANSWER_BOUND_S
    while len(sent) < len(viewers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sent) == len(viewers)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=ANSWER_BOUND_S)
    try:
        connection.request('GET', '/api/redeploys')
        assert connection.getresponse().status == 200
        answered_before = list(views)
    finally:
        connection.close()
    for viewer in viewers:
        viewer.join(ANSWER_BOUND_S)
    # The history did not wait for a view to give its thread back.
    assert answered_before == []
    assert views == [200] * len(viewers)
