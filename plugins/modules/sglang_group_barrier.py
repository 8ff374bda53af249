#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_group_barrier
short_description: (internal to the sglang role) Fail every node of a server group when one node failed a step of the window
version_added: 0.3.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - A step of the C(gpuops.sglang.sglang) role's window for a server that spans several hosts
    (C(sglang_server_group)), run on every node under the C(linear) strategy so that no node goes on before every
    node did the steps before it.
  - "Every node says it got to the barrier first (the role sets the variable O(said) names to O(step) in the task
    before). A node that did not (it failed an earlier step and waits in its rescue, or it was left alone), a node
    no longer among the batch's active hosts (unreachable, or failed outside any rescue), or a node whose result
    registered under one of the names in O(results) failed or was unreachable, fails this node too, saying which
    node and why: every node's rescue then rolls the whole group back."
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.controller_decision
options:
  step:
    description: The barrier's name; every node must have set the variable O(said) names to it.
    type: str
    required: true
  group:
    description:
      - The server group (C(gpuops.sglang.sglang_plan)'s C(group)), whose C(nodes) are checked; none for a
        single-node server, which checks only O(host).
    type: dict
  host:
    description: This host's name.
    type: str
    required: true
  said:
    description: The variable in which each node says which barrier it got to, read through C(hostvars).
    type: str
    required: true
  results:
    description:
      - The registered variables of the steps, in the steps' order, read to say which step a node failed. A skipped
        or undefined result is no failure.
      - Default, the results of the outage window's steps as the step table names them (C(plugin_utils/_steps.py)).
    type: list
    elements: str
notes:
  - Meant for the role's own tasks.
'''

EXAMPLES = r'''
- name: Every node stopped and freed, or the whole group rolls back
  gpuops.sglang.sglang_group_barrier:
    step: stopped
    group: "{{ plan.group }}"
    host: "{{ inventory_hostname }}"
    said: barrier_step
    results: [stop, gpu_release]
'''

RETURN = r'''
failed_nodes:
  description: The nodes that failed a step or left the play (empty when every node may go on).
  returned: always
  type: list
  elements: str
'''
