# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang gateway's worker API (sglang-router 0.3, smg: the Shepherd Model Gateway), pure standard library.

Tested against sglang-router 0.3.2 and smg 1.13.0 (tests/fixtures/*-workers*.json):
  GET    /workers        {"workers": [{"id", "url", "is_healthy", "load", ...}], "total": N, ...}; smg adds
                         "status": "ready", "not_ready" then "failed" (its health checks fail) or "draining"
                         (being removed)
  DELETE /workers/{id}   202 {"status": "accepted", "worker_id": ...}: removed in the background. sglang-router
                         drops the worker from the listing; smg marks it draining at once (no new request goes
                         to it), waits its drain settle time (drain_settle_secs, 5 s, not a `smg launch` flag)
                         and only then drops it. It does not wait for the requests in flight.
  POST   /workers        {"url": ..., "api_key": ...} -> 202, added in the background; "api_key" is the
                         worker's own key, which the router then sends to it (health, /server_info,
                         /model_info and the requests it routes there) instead of the client's header. smg
                         answers 409 (WORKER_ALREADY_EXISTS) for the URL of a worker it still lists, a
                         draining one too, and lists a new worker only once its health check passed.
Both changes are asynchronous, so every change is followed by reading /workers until it shows.
Removal only stops new traffic: what the router already sent to the worker still runs there.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any, Callable, FrozenSet, Optional, Union


from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until
from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import (
    HttpError, bearer, endpoint, http_request, parse_json, resolve)


class RouterError(Exception):
    """The router did not answer as its API says; the message says how."""


class UnmatchedWorker(RouterError):
    """Whether the router lists this server cannot be told: a spelling of it, or of a worker the router lists at
    the same scheme and port, names no address (its name does not resolve), or two workers are this server."""


def normalize_url(url: str) -> str:
    return url.strip().rstrip('/')


# smg's worker statuses (sglang-router 0.3 gives none).
READY = 'ready'
DRAINING = 'draining'
# admit()'s default: the caller has not read the listing.
UNREAD = object()


def workers_from_listing(body: bytes) -> list[Any]:
    """[{"id", "url", "is_healthy", "status"}] from a GET /workers body (sglang-router 0.3.x, smg, or a bare list
    as older gateways sent); "status" is None where the gateway gives none."""
    data = parse_json(body)
    entries = data.get('workers') if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise RouterError('GET /workers answered without a "workers" list')
    workers = []
    for entry in entries:
        if isinstance(entry, str):  # very old routers listed bare URLs
            workers.append({'id': None, 'url': normalize_url(entry), 'is_healthy': None, 'status': None})
        else:
            workers.append({'id': entry.get('id'), 'url': normalize_url(entry['url']),
                            'is_healthy': entry.get('is_healthy'), 'status': entry.get('status')})
    return workers


def entry_for(workers: list[dict[str, Any]] | None, url: str) -> dict[str, Any] | None:
    """The listing's entry for url, or None."""
    wanted = normalize_url(url)
    return next((worker for worker in workers or [] if worker['url'] == wanted), None)


Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
# What a host name stands for: its addresses, or None when it names none (it does not resolve).
Addresses = Optional[FrozenSet[Address]]


def addresses_of(host: str, port: int, seconds: float) -> Addresses:
    """The addresses host stands for (every one getaddrinfo gives, IPv4 and IPv6; an IPv4-mapped IPv6 address
    as its IPv4 one), looked up within seconds; None when the name does not resolve in that time."""
    try:
        found = resolve(host, port, seconds)
    except Exception:  # whatever getaddrinfo raised (no such name, a name it cannot encode): no address known
        return None
    if not found:
        return None
    # An IPv6 address may carry its interface (fe80::1%eth0): the address is what tells a server.
    addresses = (ipaddress.ip_address(info[4][0].split('%', 1)[0]) for info in found)
    return frozenset(getattr(address, 'ipv4_mapped', None) or address for address in addresses)


# What an operator does about an UnmatchedWorker (the module's option, the role's variable).
SET_WORKER_URL = ("Set worker_url (the role's sglang_router_worker_url) to the router's spelling of this server, "
                  "as GET /workers lists it")


def _endpoint_or_none(url: str) -> tuple[str, str, int] | None:
    try:
        return endpoint(url)
    except HttpError:
        return None


def match_worker(workers: list[dict] | None, url: str, addresses: Callable[[str, int], Addresses]) -> dict | None:
    """The listing's entry for the server at url, or None when the router does not list it.

    The router may know the server under another spelling than url (an address where url names the host, or
    the reverse): an entry with url's scheme and port whose host stands for one of the addresses url's host
    stands for is this server. `addresses(host, port)`: a frozenset of addresses, None when it names none.
    An entry spelled as url is taken without a lookup. UnmatchedWorker, naming both spellings, when the
    router lists a worker at url's scheme and port and whether it is this server cannot be told (its name or
    url's does not resolve), or when two entries are this server.
    """
    exact = entry_for(workers, url)
    if exact is not None:
        return exact
    mine = _endpoint_or_none(normalize_url(url))
    if mine is None:
        return None
    scheme, host, port = mine
    # Workers at another scheme or port are other servers, whatever their host: only these are looked up.
    alike = [(worker, theirs[1]) for worker, theirs in ((worker, _endpoint_or_none(worker['url']))
                                                        for worker in workers or [])
             if theirs is not None and (theirs[0], theirs[2]) == (scheme, port)]
    if not alike:
        return None
    own = addresses(host, port)
    if own is None:
        raise UnmatchedWorker(
            'whether the router lists this server cannot be told: %s names no address here (%s does not resolve) '
            'and the router lists %s at the same port. %s' % (
                url, host, ', '.join(worker['url'] for worker, dummy in alike), SET_WORKER_URL))
    matched, unresolved = [], []
    for worker, their_host in alike:
        theirs = addresses(their_host, port)
        if theirs is None:
            unresolved.append(worker['url'])
        elif theirs & own:
            matched.append(worker)
    if len(matched) > 1:
        raise UnmatchedWorker('the router lists this server (%s) %d times: %s. Remove all but one from the router' % (
            url, len(matched), ', '.join(worker['url'] for worker in matched)))
    if matched:
        return matched[0]
    if unresolved:
        raise UnmatchedWorker(
            'whether the router lists this server cannot be told: it lists %s, whose host does not resolve here, '
            'and this server is %s (%s). %s, or take the stale worker out of the router' % (
                ', '.join(unresolved), url, ', '.join(sorted(str(address) for address in own)), SET_WORKER_URL))
    return None


def in_router(worker: dict[str, Any] | None) -> bool:
    """Whether the gateway may send this listed worker new requests: listed, and not being removed (smg keeps a
    draining worker listed for its settle time, but routes nothing new to it)."""
    return worker is not None and worker.get('status') != DRAINING


def ready(worker: dict[str, Any] | None) -> bool:
    """Whether the gateway serves from this worker now: in the router, healthy by the gateway's own checks, and
    ready where the gateway says so (smg's status; a worker it lists as not_ready is not)."""
    if not in_router(worker) or worker.get('is_healthy') is False:
        return False
    return worker.get('status') in (None, READY)


def not_ready_detail(worker: dict[str, Any]) -> str:
    if worker.get('status') not in (None, READY):
        return 'but as %s' % worker['status']
    return 'but not as healthy'


class Router:
    """One router, reached at base_url; every request bounded by request_timeout.

    The bound is on the whole exchange and its answer is capped (_http): a router that trickles, never ends
    its answer or answers a body that is not a listing costs one request_timeout and a RouterError, so
    take_out and admit end within their timeout plus about two request_timeouts whatever the router does.
    """

    def __init__(self, base_url: str, request_timeout: float = 5.0, api_key: str | None = None) -> None:
        self.base_url = normalize_url(base_url)
        self.request_timeout = request_timeout
        self.headers = bearer(api_key)
        self.requests = []
        # The last listing read (None before any): what a caller reports after a wait, without asking again.
        # take_out and admit forget the listing before they change anything, so after one of them it is
        # always a listing read after the change (None when none could be read).
        self.last_workers = None

    def _call(self, method: str, path: str, body: dict[str, str] | None = None) -> tuple[int, bytes]:
        status, answer = http_request(method, self.base_url + path, self.request_timeout, body=body,
                                      headers=self.headers)
        self.requests.append('%s %s -> %s' % (method, path, 'no answer' if status == -1 else status))
        return status, answer

    def workers(self) -> list[Any]:
        status, body = self._call('GET', '/workers')
        if status != 200:
            raise RouterError('GET %s/workers answered %s%s' % (
                self.base_url, 'nothing' if status == -1 else status, self._detail(body)))
        try:
            self.last_workers = workers_from_listing(body)
            return self.last_workers
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RouterError('GET %s/workers answered an unexpected body: %s' % (self.base_url, exc))

    def find(self, url: str) -> dict[str, Any] | None:
        return entry_for(self.workers(), url)

    def remove(self, worker: dict[str, Any]) -> None:
        status, body = self._call('DELETE', '/workers/%s' % worker['id'])
        if status not in (200, 202, 204):
            raise RouterError('DELETE /workers/%s (%s) answered %s%s' % (
                worker['id'], worker['url'], 'nothing' if status == -1 else status, self._detail(body)))

    def add(self, url: str, worker_api_key: str | None = None) -> bool:
        """POST the worker; False when the gateway already lists its URL (smg's 409: the caller waits)."""
        document = {'url': normalize_url(url)}
        if worker_api_key:
            document['api_key'] = worker_api_key
        status, body = self._call('POST', '/workers', body=document)
        if status == 409:
            return False
        if status not in (200, 201, 202):
            raise RouterError('POST /workers {"url": "%s"} answered %s%s' % (
                url, 'nothing' if status == -1 else status, self._detail(body)))
        return True

    def wait_for(self, url: str, settled: Callable, timeout: float, interval: float = 0.1) -> dict[str, Any] | None:
        """Read /workers until settled(url's entry or None) holds; returns the last entry (None when absent).

        One failed read (a router busy for a moment) does not end the wait; a router that never answers
        again raises its last error at the deadline.
        """
        state = {'error': None, 'worker': None}

        def read() -> dict[str, Any]:
            try:
                state.update(worker=self.find(url), error=None)
            except RouterError as exc:
                state['error'] = exc
            return state

        poll_until(read, lambda current: current['error'] is None and settled(current['worker']), timeout,
                   first_interval=interval, max_interval=0.5)
        if state['error'] is not None:
            raise RouterError(str(state['error']))
        return state['worker']

    def take_out(self, url: str, timeout: float, worker: dict[str, Any] | None = None) -> bool:
        """Remove url and wait until the router sends it no new request; returns whether it was in the router.

        `worker`: its entry, when the caller has just read it (no second listing). DELETE is asynchronous
        (202): a router that still lists the worker as routable may still send it requests, so that is a
        failure. smg's draining worker is out already (it stays listed for its settle time).
        """
        worker = worker or self.find(url)
        if not in_router(worker):
            return False
        self.last_workers = None
        self.remove(worker)
        if in_router(self.wait_for(url, lambda entry: not in_router(entry), timeout)):
            raise RouterError('the router %s still lists %s %ss after DELETE /workers/%s: it may still send it '
                              'requests' % (self.base_url, url, timeout, worker['id']))
        return True

    def admit(self, url: str, timeout: float, worker: dict[str, Any] | None = UNREAD,
              worker_api_key: str | None = None) -> dict[str, Any]:
        """Add url (unless in the router) and wait until the router serves from it; returns its entry.

        `worker`: its entry (None: not listed) when the caller has just read the listing; left out, it is read
        here. A worker smg still lists as draining is waited for until it is gone (adding its URL again is
        refused meanwhile, and its pending removal would drop a replaced entry); a listed one that is not
        ready is waited for, not added again.
        `worker_api_key`: the worker's own key, which the router then sends it.
        """
        begun = time.monotonic()
        if worker is UNREAD:
            worker = self.find(url)
        self.last_workers = None
        if worker is not None and not in_router(worker):
            if self.wait_for(url, lambda entry: entry is None, timeout) is not None:
                raise RouterError('the router %s still lists %s as draining %ss on: smg removes a worker only '
                                  'after its drain settle time (5 s); give it a longer timeout'
                                  % (self.base_url, url, timeout))
            worker = None
        if worker is None:
            self.add(url, worker_api_key)
        worker = self.wait_for(url, ready, max(0.0, timeout - (time.monotonic() - begun)))
        if worker is None:
            raise RouterError('the router %s did not list %s within %ss after POST /workers'
                              % (self.base_url, url, timeout))
        if not ready(worker):
            raise RouterError('the router %s lists %s %s within %ss'
                              % (self.base_url, url, not_ready_detail(worker), timeout))
        return worker

    @staticmethod
    def _detail(body: bytes) -> str:
        text = body.decode('utf-8', 'replace').strip() if body else ''
        return ': %s' % text[:300] if text else ''
