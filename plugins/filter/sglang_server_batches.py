# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

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
  - The rolling policy is the operator's where set (O(serial), O(canary), O(max_unavailable),
    O(max_fail_percentage)); a knob left unset takes the safe default, a canary of one server, then batches of
    25% of the servers (at least 1), at most 25% of the fleet's servers unavailable (at least 1; no such bound
    when O(serial) is set, as the batches are the bound asked for), the first failure stopping the rollout. The
    whole fleet at once only when asked, C(-e redeploy_serial=100% -e redeploy_canary=0). RV(_value.policy)
    says which applied and why.
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
      repeats); unset or empty: V(25%)."
    type: raw
  canary:
    description: The canary's size in servers (0 or less, none); unset or empty, V(1).
    type: int
  max_unavailable:
    description: At most this many servers of the fleet unavailable at once (0, no limit); unset or empty, 25% of
      the fleet's servers (at least 1) when O(serial) is unset too, else 0.
    type: int
  max_fail_percentage:
    description: Stop the rollout once more than this share of the finished servers failed; unset or empty, V(0).
    type: float
  fleet:
    description: The fleet's hosts (the role's C(sglang_fleet_hosts)), whose servers a percentage of the
      unavailability budget is of; the play's hosts when unset.
    type: list
    elements: str
'''

EXAMPLES = r'''
- name: Sort the servers into the single-node play and the group play
  ansible.builtin.set_fact:
    sglang_batches: >-
      {{ ansible_play_hosts_all | gpuops.sglang.sglang_server_batches(hostvars, redeploy_serial | default(none),
                                                                      redeploy_canary | default(none)) }}
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
    batches:
      description: The rollout's batches in the order they run (the single-node play's, then one per server group).
      type: list
      elements: dict
      contains:
        number:
          description: The batch's place in the rollout, from 1.
          type: int
        hosts:
          description: Its hosts.
          type: list
          elements: str
        canary:
          description: Whether it holds the canary.
          type: bool
      sample: [{number: 1, hosts: [gpu1], canary: true}, {number: 2, hosts: [gpu2, gpu3], canary: false}]
    batch_lines:
      description: RV(_value.batches) in words, one line each, as the playbook prints them.
      type: list
      elements: str
      sample: ["batch 1 (canary): gpu1", "batch 2: gpu2, gpu3"]
    policy:
      description: The rolling policy that applies.
      type: dict
      contains:
        serial:
          description: The batches' size, as Ansible's C(serial) reads it.
          type: raw
        canary:
          description: The canary's size in servers.
          type: int
        max_unavailable:
          description: At most this many servers of the fleet unavailable at once (0, no limit).
          type: int
        max_fail_percentage:
          description: Stop once more than this share of the finished servers failed.
          type: float
        asked:
          description: The playbook variables the operator set (C(redeploy_serial), ...); empty, the default policy.
          type: list
          elements: str
        summary:
          description: The policy in words, saying whether it is the default or asked, and how to go faster.
          type: str
          sample: "default (no redeploy_serial, ...): canary 1 server(s), then batches of 25% server(s), ..."
'''

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.sglang.plugins.plugin_utils._rollout import rollout_plan


def sglang_server_batches(play_hosts: list[str], hostvars: dict[str, Any], serial: int | str | None = None,
                          canary: str | int | None = None, max_unavailable: int | None = None,
                          max_fail_percentage: int | None = None, fleet: list[str] | None = None) -> dict[str, Any]:
    asked = {'serial': serial, 'canary': canary, 'max_unavailable': max_unavailable,
             'max_fail_percentage': max_fail_percentage}
    try:
        return rollout_plan(list(play_hosts), lambda name: hostvars.get(name) or {}, asked,
                            list(fleet) if fleet else None)
    except ValueError as exc:
        raise AnsibleFilterError('sglang_server_batches: %s' % exc)


class FilterModule:
    def filters(self) -> dict[str, Callable]:
        return {'sglang_server_batches': sglang_server_batches}
