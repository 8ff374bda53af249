# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: sglang_server_batches
short_description: The redeploy's batches of servers, a server spanning several hosts counted once
version_added: 0.3.0
description:
  - Splits the play's hosts into single-node servers and the nodes of server groups (hosts with the same
    C(sglang_server_group), one C(sglang_node_rank) each), and cuts each into batches as Ansible's C(serial) would,
    counting B(servers) (a group is one server, and a batch never splits it).
  - RV(_value.group_serial) is the group play's C(serial) as node counts, over RV(_value.group_hosts) in that order
    (each group's nodes together, in rank order; groups in order of first appearance).
  - The canary is the rollout's first O(canary) servers, the single-node servers first; what the single-node play
    lacks of it is the group play's first batch. A percentage in O(serial) is of the play's own servers.
  - Refuses (a filter error) a host named V(group:NAME) in a fleet that has a server group NAME, and a serial
    entry that is neither a number nor a percentage.
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: The play's hosts, in play order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  hostvars:
    description: Each host's variables (C(hostvars)); C(sglang_server_group) and C(sglang_node_rank) are read.
    type: dict
    required: true
  serial:
    description: "As Ansible's C(serial): a number, a percentage such as V(50%), or a list of those (the last one
      repeats); unset or empty: every server in one batch."
    type: raw
  canary:
    description: The canary's size in servers (0 or less, none).
    type: int
    default: 0
'''

EXAMPLES = r'''
- name: Sort the servers into the single-node play and the group play
  ansible.builtin.set_fact:
    sglang_batches: >-
      {{ ansible_play_hosts_all | gpuops.sglang.sglang_server_batches(hostvars, redeploy_serial | default('100%'),
                                                                      redeploy_canary | default(0)) }}
  run_once: true
'''

RETURN = r'''
_value:
  description: The two plays' hosts and batches.
  type: dict
  contains:
    single_hosts:
      description: The single-node servers, in play order.
      type: list
      elements: str
    single_serial:
      description: The single-node play's batches (host counts, the canary's first).
      type: list
      elements: int
    group_hosts:
      description: The groups' nodes, each group's together in rank order, groups in order of first appearance.
      type: list
      elements: str
    group_serial:
      description: The group play's C(serial), node counts per batch; a batch holds whole groups.
      type: list
      elements: int
    rollout_hosts:
      description: RV(_value.single_hosts) then RV(_value.group_hosts), the rollout's order (the role's
        C(sglang_rollout_hosts), for the canary across both plays).
      type: list
      elements: str
    canary_hosts:
      description: The hosts of the canary's servers.
      type: list
      elements: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.sglang.plugins.plugin_utils._rollout import server_batches


def sglang_server_batches(play_hosts, hostvars, serial=None, canary=0):
    try:
        return server_batches(list(play_hosts), lambda name: hostvars.get(name) or {}, serial, canary)
    except ValueError as exc:
        raise AnsibleFilterError('sglang_server_batches: %s' % exc)


class FilterModule(object):
    def filters(self):
        return {'sglang_server_batches': sglang_server_batches}
