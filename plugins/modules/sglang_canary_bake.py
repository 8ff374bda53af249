#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_canary_bake
short_description: Hold a readmitted canary under live traffic and read what it and the baseline served
version_added: 0.4.0
description:
  - Reads the Prometheus C(/metrics) (SGLang's C(--enable-metrics)) of the canary server and of each baseline
    server (the servers still on the previous version, behind the same router), holds for O(seconds) while the
    router sends them its real traffic, then reads them again, and returns what each one served in between
    (the difference of the two readings) - requests, aborted requests, generated tokens, and the time to first
    token, inter-token latency and end-to-end latency histograms.
  - Judges nothing; M(gpuops.sglang.sglang_canary_verdict) compares the canary with the baseline. The
    C(gpuops.sglang.sglang) role runs both after the canary is readmitted, before its guard is confirmed
    (docs/canary-bake.md), so that a controller that dies during the bake still leaves the canary to its guard.
  - Runs on the canary's host, like its health checks; C(/metrics) needs no API key.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.guard_lease
attributes:
  check_mode:
    support: full
    details: Reads and holds nothing and says so in RV(measured); never changes anything.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
options:
  url:
    description: Base URL of the canary server.
    type: str
    required: true
  baselines:
    description:
      - The baseline servers, by host (a mapping of name to URL). A baseline that exports no figures or does not answer is
        left out, and RV(baseline_problems) says why.
    type: dict
    default: {}
  seconds:
    description: How long to hold.
    type: float
    required: true
  timeout:
    description: Seconds each C(/metrics) reading may take.
    type: float
    default: 10
'''

EXAMPLES = r'''
- name: Bake the canary for five minutes against the two servers still on the old version
  gpuops.sglang.sglang_canary_bake:
    url: http://127.0.0.1:30000
    baselines:
      gpu2: http://10.0.0.12:30000
      gpu3: http://10.0.0.13:30000
    seconds: 300
  register: bake

- name: Judge it
  gpuops.sglang.sglang_canary_verdict:
    bake: "{{ bake }}"
'''

RETURN = r'''
measured:
  description: Whether anything was read (false in check mode).
  returned: always
  type: bool
canary:
  description:
    - What the canary served during the bake (null when it exports no C(/metrics)) - C(requests), C(aborted),
      C(tokens) and the histograms C(ttft), C(itl), C(e2e), each C(bounds) (upper bounds, C(+Inf) last),
      C(counts) (samples per bucket) and C(sum) (the samples' exact total, null where not exported).
  returned: always
  type: dict
baselines:
  description: What each baseline server served during the bake, by host, in the shape of RV(canary).
  returned: always
  type: dict
baseline_problems:
  description: Why a baseline server was left out, by host.
  returned: always
  type: dict
seconds:
  description: How long the bake held, from the first reading to the last.
  returned: always
  type: float
msg:
  description: What was read, or why nothing was.
  returned: always
  type: str
'''

import time
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._live_metrics import (
    LiveMetricsError, difference, jsonable, scrape)
from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, require_positive, run_module

ARGUMENT_SPEC = dict(
    url=dict(type='str', required=True),
    baselines=dict(type='dict', default={}),
    seconds=dict(type='float', required=True),
    timeout=dict(type='float', default=10),
    guard=GUARD_OPTION,
)
# How often the hold renews the guard's lease.
TICK_S = 1.0


def bound(params: dict[str, Any]) -> float:
    """The longest the bake may take: the hold and two readings of every server."""
    return params['seconds'] + 2 * (1 + len(params['baselines'])) * params['timeout']


def read_all(params: dict[str, Any], problems: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the canary's reading, {host: reading}); a baseline that cannot be read is noted in problems."""
    try:
        canary = scrape(params['url'], params['timeout'])
    except LiveMetricsError as exc:
        fail('the canary %s did not give its live figures: %s' % (params['url'], exc))
    readings = {}
    for host, url in sorted(params['baselines'].items()):
        if host in problems:
            continue
        try:
            readings[host] = scrape(url, params['timeout'])
        except LiveMetricsError as exc:
            problems[host] = str(exc)
            continue
        if readings[host] is None:
            problems[host] = '%s exports no /metrics (started without --enable-metrics)' % url
    return canary, readings


def bake(module: AnsibleModule, result: dict[str, Any], lease: Renewer, clock: Callable = time.monotonic,
         sleep: Callable = time.sleep) -> None:
    params = module.params
    require_positive(params, 'seconds')
    require_positive(params, 'timeout')
    if module.check_mode:
        result['msg'] = 'check mode: nothing was read and nothing held'
        return
    lease.renew(bound(params))
    problems = {}
    first, before = read_all(params, problems)
    started = clock()
    while clock() - started < params['seconds']:
        sleep(min(TICK_S, max(0.0, params['seconds'] - (clock() - started))))
        lease.tick(bound(params))
    last, after = read_all(params, problems)
    held = round(clock() - started, 3)
    try:
        canary = jsonable(difference(first, last)) if first is not None and last is not None else None
    except LiveMetricsError as exc:
        # A restart (a counter went down), or figures past a float's range: the bake has nothing to judge.
        fail('the canary %s gave no figures the bake can judge: %s' % (params['url'], exc))
    baselines = {}
    for host in sorted(params['baselines']):
        if host in problems:
            continue
        try:
            baselines[host] = jsonable(difference(before[host], after[host]))
        except LiveMetricsError as exc:
            problems[host] = str(exc)
    result.update(measured=True, canary=canary, baselines=baselines, baseline_problems=problems, seconds=held)
    lease.done()
    result['msg'] = 'held %ss: the canary served %s request(s), %d baseline server(s) %s request(s)' % (
        held, int((canary or {}).get('requests') or 0), len(baselines),
        int(sum((figures.get('requests') or 0) for figures in baselines.values())))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = new_result(measured=False, canary=None, baselines={}, baseline_problems={}, seconds=0.0)
    lease = Renewer.from_option(None if module.check_mode else module.params['guard'], 'sglang_canary_bake')
    # LeaseError: the guard restored while this held; its message says so.
    run_module(module, result, lambda: bake(module, result, lease), errors=(LeaseError,))


if __name__ == '__main__':
    main()
