# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which servers of a fleet are unavailable right now, read from outside as clients see them."""

from __future__ import annotations

import threading
from typing import Any

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._router import DRAINING, Router, RouterError, normalize_url, ready
from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import http_get


def _not_serving_why(worker: dict[str, Any]) -> str:
    """Why a listed worker gets no traffic from the router: smg keeps a worker it drains listed (and maybe
    healthy) for its settle time, but routes it nothing new, so it is as unavailable as a sick one."""
    if worker.get('status') == DRAINING:
        return 'the router is draining it'
    if worker.get('is_healthy') is False:
        return 'the router marks it unhealthy'
    return 'the router lists it as %s' % worker.get('status')


def unavailable_peers(peers: dict[str, str], router_url: str | None = None, api_key: str | None = None,
                      timeout: float = 2.0, skip: set[str] = ()) -> list[Any]:
    """[(host, why)] for every peer {host: base URL} that does not answer /health with 200 or, when a
    router is named, that the router does not list as a healthy worker. Peers in skip are not probed.
    Probes run in parallel, so a fleet of N costs one probe timeout, not N."""
    listed = None
    router_problem = None
    if router_url:
        try:
            listed = {worker['url']: worker for worker in Router(router_url, timeout, api_key).workers()}
        except RouterError as exc:
            router_problem = str(exc)
    found = {}

    def probe(host: str, url: str) -> None:
        status = http_get(normalize_url(url) + '/health', timeout)[0]
        if status != 200:
            found[host] = '/health answered %s' % ('nothing' if status == -1 else status)
        elif router_problem:
            found[host] = 'the router could not be read: %s' % router_problem
        elif listed is not None and normalize_url(url) not in listed:
            found[host] = 'not in the router'
        elif listed is not None and not ready(listed[normalize_url(url)]):
            found[host] = _not_serving_why(listed[normalize_url(url)])

    threads = [threading.Thread(target=probe, args=(host, url)) for host, url in sorted(peers.items())
               if host not in skip]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(found.items())
