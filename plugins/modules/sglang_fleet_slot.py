#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_fleet_slot
short_description: (internal to the sglang role) Hold a slot in the fleet's budget of unavailable SGLang servers while one is redeployed
version_added: 0.2.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - Before a host takes its server down, O(state=acquired) counts, under one lock on the controller, the
    slots held by hosts now in their outage window (of this run or of another run on this controller) plus
    every other server of O(peers) that is unavailable right now (slots of hosts outside O(peers) do not count) (no 200 from C(/health), or, with
    O(router_url), not listed by the router as a healthy worker), and grants the slot only while the total,
    this host included, stays within O(max_unavailable). A server that is down already costs nothing more.
  - Otherwise it waits (re-reading every half second) up to O(wait_timeout), then fails saying which servers
    are unavailable and why; nothing has been stopped at that point.
  - O(state=released) gives the slot back. A slot names the ansible-playbook process that holds it, so the
    slots of a run that died do not count.
  - Runs on the controller, in-process (an action plugin); nothing runs on the managed host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
attributes:
  check_mode:
    support: full
    details: Takes no slot and does not wait.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
    details: Runs on the controller (an action plugin); needs C(/proc) there.
options:
  state:
    description: V(acquired) takes this host's slot (waiting for one), V(released) gives it back.
    type: str
    choices: [acquired, released]
    default: acquired
  host:
    description: The host the slot is for.
    type: str
    required: true
  folder:
    description: Controller folder of the slots; runs that share it share the budget.
    type: path
    required: true
  max_unavailable:
    description: How many servers of O(peers) may be unavailable at once; V(0) means no limit (every slot is granted).
    type: int
    default: 0
  peers:
    description: The fleet, as host name to the server's base URL (probed at C(/health), matched with the router's worker URLs).
    type: dict
    default: {}
  router_url:
    description: The router's base URL; a peer it does not list as healthy counts as unavailable.
    type: str
    default: ""
  router_api_key:
    description: The router's API key.
    type: str
    default: ""
  wait_timeout:
    description: Seconds to wait for a slot.
    type: float
    default: 300
  probe_timeout:
    description: Seconds one probe of a peer (or the router) may take; peers are probed in parallel.
    type: float
    default: 2
  ttl:
    description:
      - Seconds after which a granted slot no longer counts even though its run still lives (V(0) never).
      - The role passes its rollback deadline. The slot is granted before the guard is armed, so it may lapse
        before that guard restores a host whose run died in its window; such a host still counts, through
        the C(/health) probe of every peer, until its server answers again.
    type: float
    default: 0
seealso:
  - module: gpuops.sglang.sglang_router_worker
'''

EXAMPLES = r'''
- name: Take a slot; at most two servers of the play down at once
  gpuops.sglang.sglang_fleet_slot:
    host: "{{ inventory_hostname }}"
    folder: ~/.cache/gpuops-sglang/fleet-slots
    max_unavailable: 2
    peers: {gpu1: "http://10.0.0.11:30000", gpu2: "http://10.0.0.12:30000", gpu3: "http://10.0.0.13:30000"}
    router_url: http://10.0.0.5:30080

- name: Give it back
  gpuops.sglang.sglang_fleet_slot:
    state: released
    host: "{{ inventory_hostname }}"
    folder: ~/.cache/gpuops-sglang/fleet-slots
'''

RETURN = r'''
slot:
  description: Whether this host holds a slot (always true when O(max_unavailable) is 0).
  returned: always
  type: bool
held_by:
  description: Other hosts holding a slot when the decision was made.
  returned: always
  type: list
  elements: str
unavailable:
  description: Other peers unavailable when the decision was made, each with why.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: The peer.
      type: str
    why:
      description: Why it counts as unavailable (its C(/health) answer, or its place in the router).
      type: str
waited_s:
  description: Seconds spent waiting for the slot.
  returned: always
  type: float
'''
