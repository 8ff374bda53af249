#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_router_worker
short_description: Take an SGLang server out of the SGLang router, or add it back
version_added: 0.2.0
description:
  - Manages one worker of the SGLang gateway through its worker API, C(smg) (the Shepherd Model Gateway, the
    SGLang project's gateway today) or the C(sglang-router) 0.3 it grew out of.
  - A worker is in the router when the gateway lists it and may send it new requests. C(smg) lists a worker it
    is removing with status C(draining) for its drain settle time (5 s) before it drops it, and sends it nothing
    new meanwhile; a draining worker is not in the router.
  - O(state=absent) removes the worker, so the router sends it no new request, and waits until the router no
    longer lists it (C(sglang-router) 0.3) or lists it as draining (C(smg), at once). Requests already routed to
    it still run there, with either gateway; wait for them on the server
    (M(gpuops.sglang.sglang_server) O(gpuops.sglang.sglang_server#module:drain_timeout)) before stopping it.
  - O(state=present) adds the worker and waits until the router serves from it, by the gateway's own view
    (listed and healthy, and with C(smg) its status C(ready)). A worker listed but not ready (C(smg)'s
    C(not_ready) or C(failed), or unhealthy) is waited for within O(timeout), not added again. A worker
    C(smg) still lists as draining is waited for until it is dropped, then added; C(smg) refuses its URL
    meanwhile (409), and its pending removal would drop an entry replaced with C(PUT).
  - O(state=query) only reads whether the worker is in the router.
  - The worker is found in the gateway's listing by what its URL stands for, not only by its spelling. A listed
    worker with the same scheme and port whose host resolves to one of the addresses O(worker_url)'s host
    resolves to (every address, IPv4 and IPv6) is this server, for example V(http://10.0.0.11:30000) for
    O(worker_url=http://gpu1:30000). Every later request names it as the gateway does (RV(worker_url_in_router)).
  - A listed worker at the same scheme and port whose name does not resolve on the managed host (or an
    O(worker_url) whose name does not resolve, beside such workers) leaves it unknown whether the gateway lists
    this server; the module then fails naming both spellings and changes nothing, as it does when two listed
    workers are this server. A worker spelled exactly as O(worker_url) is taken without any lookup.
  - Both changes are asynchronous in the gateway (it answers 202); the module reads C(/workers) until the
    change shows, up to O(timeout).
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
attributes:
  check_mode:
    support: full
    details: Reads the router and says whether the worker would be added or removed; changes nothing.
  diff_mode:
    support: full
    details: Shows the worker's membership before and after.
  platform:
    platforms: posix
options:
  router_url:
    description: Base URL of the router, for example V(http://10.0.0.5:30080).
    type: str
    required: true
  worker_url:
    description:
      - The server's URL, for example V(http://10.0.0.11:30000). The gateway may list it under another spelling
        of the same scheme, address and port (an address for a host name, or the reverse); the module finds it
        there and uses the gateway's spelling. One it does not list at all is added under this one.
      - Each host name is resolved on the managed host within O(request_timeout).
    type: str
    required: true
  state:
    description: V(present) adds the worker, V(absent) removes it, V(query) reads its membership.
    type: str
    choices: [present, absent, query]
    default: present
  timeout:
    description:
      - Seconds the router may take to show the change (and, for V(present), to find the worker ready).
      - With C(smg), V(present) right after a removal also waits out the drain settle time (5 s from the removal).
    type: float
    default: 30
  request_timeout:
    description: Seconds one HTTP request to the router may take.
    type: float
    default: 5
  api_key:
    description: The router's API key (its C(--api-key)), sent as a bearer token.
    type: str
  worker_api_key:
    description:
      - The worker's own API key (the server's C(--api-key)), handed to the router with V(state=present)
        in the C(POST /workers) body. The router sends it to the worker on its health checks, its
        C(/server_info) and C(/model_info) reads and the requests it routes there; without it, the router
        forwards the client's C(Authorization) header, which a server with its own key refuses.
      - Never logged nor returned.
    type: str
notes:
  - Tested with smg 1.13.0 and sglang-router 0.3.2 (C(GET /workers), C(DELETE /workers/{id}), C(POST /workers)).
    On removal sglang-router 0.3.2 drops the worker from C(GET /workers) within about a second; smg 1.13.0
    marks it C(draining) at once, waits C(drain_settle_secs) (5 s by default, not counting requests in flight)
    and then drops it. docs/router.md has the measurements.
seealso:
  - module: gpuops.sglang.sglang_server
'''

EXAMPLES = r'''
- name: Take the server out of the router (no new request reaches it)
  gpuops.sglang.sglang_router_worker:
    router_url: http://10.0.0.5:30080
    worker_url: http://10.0.0.11:30000
    state: absent

- name: Add the verified server back
  gpuops.sglang.sglang_router_worker:
    router_url: http://10.0.0.5:30080
    worker_url: http://10.0.0.11:30000
    state: present
    worker_api_key: "{{ vault_sglang_api_key }}"
'''

RETURN = r'''
member_before:
  description:
    - Whether the worker was in the router when the module began (listed, and not draining); null when the router
      could not be read, or when whether it lists this server could not be told (a name that does not resolve).
  returned: always
  type: bool
member:
  description:
    - Whether the worker is in the router at the end (in check mode, whether it would be).
    - Null when the router could not be read after the change was asked (or at all), since it is then unknown.
  returned: always
  type: bool
healthy:
  description: The router's own view of the worker's health at the end (null when not in the router).
  returned: always
  type: bool
status:
  description:
    - The gateway's status of the worker at the end where it gives one (smg, C(ready); C(not_ready), then
      C(failed), while its health checks fail; C(draining) while it is removed); null when not listed or with
      sglang-router 0.3, which gives none.
  returned: always
  type: str
worker_url_in_router:
  description:
    - The URL under which the router listed this server when the module began, O(worker_url) itself or the
      gateway's own spelling of the same scheme, address and port (for example V(http://10.0.0.11:30000) for
      O(worker_url=http://gpu1:30000)); null when the router did not list it, or could not be read.
    - Later runs of the module for this server (removal, re-adding) should name it by this URL.
  returned: always
  type: str
  sample: http://10.0.0.11:30000
worker_id:
  description: The router's id of the worker (null when not listed).
  returned: always
  type: str
workers_total:
  description: How many workers the router lists at the end.
  returned: always
  type: int
elapsed:
  description: Seconds the module took.
  returned: always
  type: float
requests:
  description: The HTTP requests made to the router, with their status.
  returned: always
  type: list
  elements: str
'''

import time
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, run_module
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._router import (
    Router, RouterError, UnmatchedWorker, addresses_of, entry_for, in_router, match_worker, normalize_url, ready,
)

ARGUMENT_SPEC = dict(
    router_url=dict(type='str', required=True),
    worker_url=dict(type='str', required=True),
    state=dict(type='str', default='present', choices=['present', 'absent', 'query']),
    timeout=dict(type='float', default=30),
    request_timeout=dict(type='float', default=5),
    api_key=dict(type='str', no_log=True),
    worker_api_key=dict(type='str', no_log=True),
)


def converge(module: AnsibleModule, router: Router, worker_url: str, addresses: Callable,
             result: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """(the worker's entry at the end or None, whether it is a member); the router changed unless check mode."""
    params = module.params
    workers = router.workers()
    result['workers_total'] = len(workers)
    worker = match_worker(workers, worker_url, addresses)
    # The router's own spelling of this server names it in every later request (removal, the waits, re-adding
    # a draining one): the router knows no other.
    result['worker_url_in_router'] = worker['url'] if worker is not None else None
    listed_url = result['worker_url_in_router'] or worker_url
    result['member_before'] = in_router(worker)
    wanted = {'present': True, 'absent': False, 'query': result['member_before']}[params['state']]
    result['changed'] = wanted != result['member_before']
    # In the router but not ready is not yet "present": wait for the gateway's own health check below.
    listed_not_ready = params['state'] == 'present' and in_router(worker) and not ready(worker)
    if (not result['changed'] and not listed_not_ready) or module.check_mode:
        return worker, wanted
    if wanted:
        worker = router.admit(listed_url, params['timeout'], worker=worker, worker_api_key=params['worker_api_key'])
    else:
        router.take_out(listed_url, params['timeout'], worker=worker)
        worker = entry_for(router.last_workers, listed_url)
    result['workers_total'] = len(router.last_workers)
    return worker, wanted


def manage(module: AnsibleModule, router: Router, worker_url: str, begun: float, result: dict[str, Any]) -> None:
    params = module.params
    msg = None
    known = {}

    def addresses(host: str, port: int) -> list[str]:
        # Each name is looked up once, within one request's time (a dead DNS server costs no more).
        if host not in known:
            known[host] = addresses_of(host, port, params['request_timeout'])
        return known[host]
    try:
        worker, member = converge(module, router, worker_url, addresses, result)
    except RouterError as exc:
        # What the router did is unknown here: report the membership last read, not a guess (unknown,
        # None, when a change was asked and no listing was read after it, or this server could not be told
        # apart in the listing).
        listed = router.last_workers
        worker = entry_for(listed, result['worker_url_in_router'] or worker_url)
        result['workers_total'] = len(listed) if listed is not None else result['workers_total']
        member = None if listed is None or isinstance(exc, UnmatchedWorker) else in_router(worker)
        msg = 'sglang_router_worker %s of %s at %s failed: %s' % (
            params['state'], worker_url, params['router_url'], to_native(exc))
    routed = worker if in_router(worker) else None
    result.update(member=member, healthy=routed.get('is_healthy') if routed else None,
                  worker_id=routed.get('id') if routed else None, status=worker.get('status') if worker else None,
                  elapsed=round(time.time() - begun, 3))
    if module._diff:
        result['diff'] = {'before': {'member': result['member_before']}, 'after': {'member': member}}
    if msg:
        fail(msg)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    begun = time.time()
    router = Router(params['router_url'], params['request_timeout'], params['api_key'])
    result = new_result(member_before=None, member=None, healthy=None, worker_id=None, status=None, workers_total=0,
                        worker_url_in_router=None, elapsed=0.0, requests=router.requests)
    run_module(module, result, lambda: manage(module, router, normalize_url(params['worker_url']), begun, result))


if __name__ == '__main__':
    main()
