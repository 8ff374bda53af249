# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang router's worker API (sglang-router / SGLang Model Gateway), pure standard library.

Tested against sglang-router 0.3.2:
  GET    /workers        {"workers": [{"id", "url", "is_healthy", "load", ...}], "total": N, ...}
  DELETE /workers/{id}   202 {"status": "accepted", "worker_id": ...}: removed in the background
  POST   /workers        {"url": ..., "api_key": ...} -> 202, added in the background; "api_key" is the
                         worker's own key, which the router then sends to it (health, /server_info,
                         /model_info and the requests it routes there) instead of the client's header
Both changes are asynchronous, so every change is followed by reading /workers until it shows.
Removal only stops new traffic: what the router already sent to the worker still runs there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuops.sglang.plugins.module_utils._polling import poll_until
from ansible_collections.gpuops.sglang.plugins.module_utils._http import bearer, http_request


class RouterError(Exception):
    """The router did not answer as its API says; the message says how."""


def normalize_url(url):
    return url.strip().rstrip('/')


def workers_from_listing(body):
    """[{"id", "url", "is_healthy"}] from a GET /workers body (0.3.x, or a bare list as older gateways sent)."""
    data = json.loads(body.decode('utf-8'))
    entries = data.get('workers') if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise RouterError('GET /workers answered without a "workers" list')
    workers = []
    for entry in entries:
        if isinstance(entry, str):  # very old routers listed bare URLs
            workers.append({'id': None, 'url': normalize_url(entry), 'is_healthy': None})
        else:
            workers.append({'id': entry.get('id'), 'url': normalize_url(entry['url']),
                            'is_healthy': entry.get('is_healthy')})
    return workers


def entry_for(workers, url):
    """The listing's entry for url, or None."""
    wanted = normalize_url(url)
    return next((worker for worker in workers or [] if worker['url'] == wanted), None)


class Router(object):
    """One router, reached at base_url; every request bounded by request_timeout."""

    def __init__(self, base_url, request_timeout=5.0, api_key=None):
        self.base_url = normalize_url(base_url)
        self.request_timeout = request_timeout
        self.headers = bearer(api_key)
        self.requests = []
        # The last listing read (None before any): what a caller reports after a wait, without asking again.
        # take_out and admit forget the listing before they change anything, so after one of them it is
        # always a listing read after the change (None when none could be read).
        self.last_workers = None

    def _call(self, method, path, body=None):
        status, answer = http_request(method, self.base_url + path, self.request_timeout, body=body,
                                      headers=self.headers)
        self.requests.append('%s %s -> %s' % (method, path, 'no answer' if status == -1 else status))
        return status, answer

    def workers(self):
        status, body = self._call('GET', '/workers')
        if status != 200:
            raise RouterError('GET %s/workers answered %s%s' % (
                self.base_url, 'nothing' if status == -1 else status, self._detail(body)))
        try:
            self.last_workers = workers_from_listing(body)
            return self.last_workers
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RouterError('GET %s/workers answered an unexpected body: %s' % (self.base_url, exc))

    def find(self, url):
        return entry_for(self.workers(), url)

    def remove(self, worker):
        status, body = self._call('DELETE', '/workers/%s' % worker['id'])
        if status not in (200, 202, 204):
            raise RouterError('DELETE /workers/%s (%s) answered %s%s' % (
                worker['id'], worker['url'], 'nothing' if status == -1 else status, self._detail(body)))

    def add(self, url, worker_api_key=None):
        document = {'url': normalize_url(url)}
        if worker_api_key:
            document['api_key'] = worker_api_key
        status, body = self._call('POST', '/workers', body=document)
        if status not in (200, 201, 202):
            raise RouterError('POST /workers {"url": "%s"} answered %s%s' % (
                url, 'nothing' if status == -1 else status, self._detail(body)))

    def wait_for(self, url, present, timeout, interval=0.1):
        """Read /workers until url is listed (and healthy) or gone; returns the last entry (None when absent).

        One failed read (a router busy for a moment) does not end the wait; a router that never answers
        again raises its last error at the deadline.
        """
        state = {'error': None, 'worker': None}

        def read():
            try:
                state.update(worker=self.find(url), error=None)
            except RouterError as exc:
                state['error'] = exc
            return state

        def settled(current):
            if current['error'] is not None:
                return False
            if present:
                return current['worker'] is not None and current['worker'].get('is_healthy') is not False
            return current['worker'] is None

        poll_until(read, settled, timeout, first_interval=interval, max_interval=0.5)
        if state['error'] is not None:
            raise RouterError(str(state['error']))
        return state['worker']

    def take_out(self, url, timeout, worker=None):
        """Remove url and wait until the router no longer lists it; returns whether it was listed.

        `worker`: its entry, when the caller has just read it (no second listing). DELETE is asynchronous
        (202): a router that still lists the worker may still send it requests, so that is a failure.
        """
        worker = worker or self.find(url)
        if worker is None:
            return False
        self.last_workers = None
        self.remove(worker)
        if self.wait_for(url, False, timeout) is not None:
            raise RouterError('the router %s still lists %s %ss after DELETE /workers/%s: it may still send it '
                              'requests' % (self.base_url, url, timeout, worker['id']))
        return True

    def admit(self, url, timeout, listed=None, worker_api_key=None):
        """Add url (unless listed) and wait until the router lists it as healthy; returns its entry.

        `listed`: whether the caller has just read it in the listing (None: read it here).
        `worker_api_key`: the worker's own key, which the router then sends it.
        """
        if listed is None:
            listed = self.find(url) is not None
        self.last_workers = None
        if not listed:
            self.add(url, worker_api_key)
        worker = self.wait_for(url, True, timeout)
        if worker is None:
            raise RouterError('the router %s did not list %s within %ss after POST /workers'
                              % (self.base_url, url, timeout))
        if worker.get('is_healthy') is False:
            raise RouterError('the router %s lists %s but not as healthy within %ss' % (self.base_url, url, timeout))
        return worker

    @staticmethod
    def _detail(body):
        text = body.decode('utf-8', 'replace').strip() if body else ''
        return ': %s' % text[:300] if text else ''
