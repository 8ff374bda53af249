#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: sglang_group_decision
short_description: Decide once for a server that spans several hosts whether every node is redeployed
version_added: 0.3.0
description:
  - A step of the C(gpuops.sglang.sglang) role, after C(sglang_decision) on every node of a server group
    (C(sglang_server_group)). Reads this host's plan (C(_sglang_plan)) for the group, then every node's registered
    C(_sglang_plan), C(_sglang_state) and C(_sglang_decision) through C(hostvars).
  - "Any node's reason redeploys every node; each reason is prefixed with its node's name (V(mn2: server not
    running)). Rank 0 whose real generation failed is a reason even while its C(/health) answers; so is a rank
    above 0 whose server is not running, and a group patched on some nodes only."
  - "Fails, with nothing touched, when the nodes run different sglang versions, when their launch arguments
    differ (but C(--node-rank) and C(--host)), or when a node has no plan, state or decision in this run (outside
    the play, failed earlier, or left alone): a group is redeployed on every node or on none."
  - A single-node server (no group) keeps its own C(_sglang_decision), unchanged; so does a node left alone.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.controller_decision
options: {}
notes:
  - Meant for the role's own tasks, on every node of a server group after C(sglang_decision).
'''

EXAMPLES = r'''
- name: Decide once for the whole server group
  gpuops.sglang.sglang_group_decision:
  register: _sglang_group_decision
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
