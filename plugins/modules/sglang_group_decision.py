#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_group_decision
short_description: (internal to the sglang role) Decide once for a server that spans several hosts whether every node is redeployed
version_added: 0.3.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - A step of the C(gpuops.sglang.sglang) role, after C(sglang_decision) on every node of a server group
    (C(sglang_server_group)). Takes this host's group, gate and decision as options; reads every node's plan, state and
    decision through C(hostvars), under the variable names O(from_nodes) gives (a task's options cannot hold what
    another host registered).
  - "Any node's reason redeploys every node; each reason is prefixed with its node's name (V(mn2: server not
    running)). Rank 0 whose real generation failed is a reason even while its C(/health) answers; so is a rank
    above 0 whose server is not running, and a group patched on some nodes only."
  - "Fails, with nothing touched, when the nodes run different sglang versions, when their launch arguments
    differ (but C(--node-rank) and C(--host)), or when a node has no plan, state or decision in this run (outside
    the play, failed earlier, or left alone): a group is redeployed on every node or on none."
  - A single-node server (no group) keeps its own decision (O(decision)), unchanged; so does a node left alone.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.controller_decision
options:
  group:
    description: This host's server group (C(gpuops.sglang.sglang_plan)'s C(group)); none for a single-node server.
    type: dict
  left_alone_because:
    description: Why the rollout leaves this host alone (C(gpuops.sglang.sglang_plan)'s C(left_alone_because)); empty when it takes part.
    type: str
    default: ''
  decision:
    description: This host's result of C(gpuops.sglang.sglang_decision).
    type: dict
    default: {}
  host:
    description: This host's name (the node list's name for it).
    type: str
    required: true
  from_nodes:
    description: The names under which every node registered the three results read through C(hostvars).
    type: dict
    required: true
    suboptions:
      plan:
        description: The variable holding a node's C(sglang_plan) result.
        type: str
        required: true
      state:
        description: The variable holding a node's C(sglang_server_info) result.
        type: str
        required: true
      decision:
        description: The variable holding a node's C(sglang_decision) result.
        type: str
        required: true
notes:
  - Meant for the role's own tasks, on every node of a server group after C(sglang_decision).
'''

EXAMPLES = r'''
- name: Decide once for the whole server group
  gpuops.sglang.sglang_group_decision:
    group: "{{ plan.group }}"
    left_alone_because: "{{ plan.left_alone_because }}"
    decision: "{{ decision }}"
    host: "{{ inventory_hostname }}"
    from_nodes: {plan: plan, state: state, decision: decision}
  register: group_decision
'''

RETURN = r'''
redeploy_needed:
  description: Whether any node has a reason (for a single-node server, its own decision's).
  returned: always
  type: bool
reasons:
  description: Every node's reasons, each prefixed with the node's name (a single-node server's own, unprefixed).
  returned: always
  type: list
  elements: str
nodes:
  description: The group's hosts by rank (rank 0 first); this host alone for a single-node server.
  returned: always
  type: list
  elements: str
problems:
  description: Why the group is refused (the task fails when there is one).
  returned: always
  type: list
  elements: str
'''
