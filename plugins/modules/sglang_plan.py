#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_plan
short_description: (internal to the sglang role) Plan a host's redeploy from the sglang role's variables (gate, rules, flags, files, peers)
version_added: 0.3.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - The first step of the C(gpuops.sglang.sglang) role. Reads the role's variables and the fleet's hostvars on
    the controller and returns what the later steps use.
  - "The rollout gate: why this host is left alone (its C(sglang_redeploy_skip), a failed canary among the first
    C(sglang_canary) hosts of the play, or a share of failed hosts above C(sglang_max_fail_percentage)), read from
    the C(sglang_redeploy_report) of the fleet's hosts that finished already."
  - The rules the argument spec cannot say (ranges and relations between variables); any broken one fails the
    task with one message per rule, joined.
  - The server's argv and what C(/server_info) must report (the flags table the C(gpuops.sglang.sglang_flags)
    filter uses too), the configuration files the role renders (launch configuration, systemd unit, adaptive tiers,
    API keys), the paths of the server's files, and the URL of each server of C(sglang_fleet_hosts).
  - "A server across several hosts (C(sglang_server_group)): its nodes (the hosts of C(sglang_fleet_hosts) in
    the same group) by C(sglang_node_rank), the argv's C(--nnodes), C(--node-rank) and C(--dist-init-addr), and
    the group refused with the rules (a node without a rank, a rank not an integer, out of range or held twice, a
    group of one node, C(sglang_tp_size) not divisible by the node count)."
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.controller_decision
options:
  gate_only:
    description: Only read the rollout gate again (after waiting for a slot in the fleet), returning RV(left_alone_because).
    type: bool
    default: false
  tune_mode:
    description:
      - The speculation tuner's mode this plan is for (an entry of RV(tune.modes)), planned with its C(settings)
        as task variables. The plan fails, before anything stops, when the role's variables it read differ from
        them. Extra variables (C(-e)) win over task variables, so a C(-e sglang_speculative_num_steps=...) would
        make every mode the same server and the table a lie.
    type: dict
notes:
  - Meant for the role's own tasks; it reads the role's variables (C(sglang_*)) from the task's variables.
'''

EXAMPLES = r'''
- name: Plan this host's run
  gpuops.sglang.sglang_plan:
  register: _sglang_plan
'''

RETURN = r'''
left_alone_because:
  description:
    - Why this host is left alone (the role reports it as skipped); empty when it takes part.
    - Not named C(skip_reason), which Ansible gives every skipped task's result.
  returned: always
  type: str
problems:
  description: The broken rules, one message each (the task fails when there is one).
  returned: unless O(gate_only)
  type: list
  elements: str
paths:
  description: The server's files (launch_file, pidfile, base_url, guard_dir, patch_stamp, stop_marker, ...) and the folders the role keeps them in (folders).
  returned: unless O(gate_only)
  type: dict
adaptive:
  description: Whether the server runs upstream's C(--speculative-adaptive) with batch-size tiers.
  returned: unless O(gate_only)
  type: bool
args:
  description: The server's argv after C(-m MODULE).
  returned: when the host takes part and no rule is broken
  type: list
  elements: str
expected_server_info:
  description: The C(/server_info) keys and values the new server must report.
  returned: when the host takes part and no rule is broken
  type: dict
expected_environment:
  description: The environment the server must report (with C(sglang_verify_environment)).
  returned: when the host takes part and no rule is broken
  type: dict
dynamic_spec_env_read_by:
  description:
    - Who reads C(sglang_dynamic_spec_env_name) in env mode, V(patch) (an added line of the patch names it) or
      V(installed) (C(sglang_dynamic_spec_env_read_by), the operator's word); empty when env mode is off. Env mode
      that nothing reads is one of the rules' refusals, before anything stops.
  returned: when the host takes part and no rule is broken
  type: str
configs:
  description: The rendered files, as sglang_server_info compares them.
  returned: when the host takes part and no rule is broken
  type: list
  elements: dict
  contains:
    label:
      description: The file's name in the report (launch configuration, systemd unit, adaptive tiers, API keys).
      type: str
    path:
      description: The live file.
      type: str
    content:
      description: What the file must hold.
      type: str
    systemd_only:
      description: Whether only a server that systemd runs uses the file.
      type: bool
contents:
  description: The rendered content of each file, by label.
  returned: when the host takes part and no rule is broken
  type: dict
files:
  description: Each rendered file without its content.
  returned: when the host takes part and no rule is broken
  type: list
  elements: dict
  contains:
    label:
      description: The file's name in the report.
      type: str
    path:
      description: The live file.
      type: str
    candidate:
      description: Where the window writes the new file before it moves it into place.
      type: str
    mode:
      description: The file's mode.
      type: str
    systemd_only:
      description: Whether only a server that systemd runs uses the file.
      type: bool
secret:
  description: Whether the rendered files carry secrets (no task shows their content then).
  returned: when the host takes part and no rule is broken
  type: bool
secret_files:
  description:
    - The labels of the files whose content is secret (the API keys file; the launch configuration with a secret
      environment); a dry run shows no diff of them.
  returned: when the host takes part and no rule is broken
  type: list
  elements: str
peers:
  description: The URL of each server of the fleet, by host.
  returned: when the host takes part and no rule is broken
  type: dict
patch:
  description:
    - The patch (C(sglang_patch_file)), read once on the controller as C(lookup('file')) finds it, so that the dry run,
      the stamp and the apply use the same bytes even if the file is edited during the run; null without a patch.
    - A patch file that cannot be read is a broken rule (RV(problems)).
  returned: when the host takes part and no rule is broken
  type: dict
  contains:
    file:
      description: C(sglang_patch_file) as given.
      type: str
    content:
      description: The unified diff.
      type: str
    sha256:
      description: The SHA-256 of the file's bytes.
      type: str
group:
  description: The server group this host is a node of; null for a single-node server (and for a refused group).
  returned: unless O(gate_only)
  type: dict
  contains:
    name:
      description: The group's name (C(sglang_server_group)).
      type: str
    rank:
      description: This node's rank.
      type: int
    nnodes:
      description: How many nodes the server spans.
      type: int
    nodes:
      description: The nodes' hosts by rank (rank 0 first).
      type: list
      elements: str
    leader:
      description: The host of rank 0, the one that serves HTTP.
      type: str
    dist_init_addr:
      description: Where the ranks meet (C(--dist-init-addr)).
      type: str
    leader_url:
      description: The URL the others reach rank 0 at (as RV(peers) computes it).
      type: str
tune:
  description: The speculation tuner's run on this host (playbooks/tune_speculation.yml).
  returned: unless O(gate_only)
  type: dict
  contains:
    modes:
      description:
        - The modes to measure, in order - C(name) (V(plain), V(eagle3), V(eagle3_steps_K)), C(steps) (draft steps, 0
          for plain decoding) and C(settings).
      type: list
      elements: dict
      contains:
        name:
          description: The mode's name.
          type: str
        steps:
          description: Its draft steps (0 for plain decoding).
          type: int
        settings:
          description: The speculation variables the mode's server runs with (C(sglang_speculative_*)).
          type: dict
    deadline:
      description: The guard's deadline for the whole run in seconds (every mode's step bounds, the router's drain).
      type: float
    problems:
      description: Why the tuner cannot run with these settings (empty when it can).
      type: list
      elements: str
timing:
  description:
    - Every time bound of the window in seconds, from one place (the collection's plugin_utils/_timing.py), for the
      role's steps to take as they are. An C(after) (how long a step hands the guard's lease over for) is keyed by
      whether the run finds the server in the router (C(in_router)) or not (C(out_of_router)).
  returned: unless O(gate_only)
  type: dict
  contains:
    arm_after:
      description: After the guard's arm (the router's removal; a rank above 0 waits for rank 0's steps).
      type: dict
    stop_after:
      description: After the graceful stop, when a container kill follows on the Proxmox node.
      type: float
    ranks_started_after:
      description: After a rank above 0 started (rank 0's start, verification and admission follow); 0 elsewhere.
      type: float
    readmit_after:
      description: After the step before the router's admission.
      type: dict
    lock_timeout:
      description: How long a restore waits for the guard's lock.
      type: float
    window_budget:
      description: How long the outage window may last (what C(sglang_rollback_deadline) must cover).
      type: float
    deadline:
      description: The guard's deadline in seconds, C(sglang_rollback_deadline), or with V(auto) RV(timing.window_budget).
      type: float
'''
