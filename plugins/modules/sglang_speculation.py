#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_speculation
short_description: (internal to the sglang role) Where drafting stops paying - a server's benchmark in each speculation mode made into a recommendation
version_added: 0.4.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its C(tune) entry point (which
    C(playbooks/tune_speculation.yml) runs), not by users; its options are the role's to give and may change
    in any release.
  - Makes the M(gpuops.sglang.sglang_benchmark) results of one server measured in several speculation modes
    (O(modes)) into one table by concurrency level, and recommends from it the batch size at which drafting
    should stop and the batch-size tiers of SGLang's C(--speculative-adaptive-config).
  - RV(recommended.threshold) is the first measured level at which plain decoding's output tokens per second
    are at least EAGLE-3's with the configured steps (the mode named V(eagle3)); null when EAGLE-3 is ahead at
    every level. RV(recommended.adaptive_config) has a tier at the first level and at each level where the
    fastest mode's draft steps change, with that step count (0 is no drafting).
  - Writes the table to O(report_dir)/<host>.speculation.json and the role variables that apply it to
    O(report_dir)/<host>.speculation.vars.yml, for C(ansible-playbook playbooks/redeploy.yml -e @FILE); <host> is
    O(host) percent-encoded but for letters, digits, C(_.-~:) (and a leading C(.) encoded), so any inventory name
    stays one file inside O(report_dir); an ordinary name is kept as it is.
  - Used by C(playbooks/tune_speculation.yml) (the C(gpuops.sglang.sglang) role's C(tune) entry point).
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
attributes:
  check_mode:
    support: none
    details: Writes the table and the vars file on the controller; the tuner runs nothing in check mode.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
    details: Runs on the controller (an action plugin); nothing runs on the managed host.
options:
  host:
    description: The host the table is of (the files' names).
    type: str
    required: true
  modes:
    description:
      - The modes measured, each C(name) (V(plain), V(eagle3), V(eagle3_steps_K)) and C(steps) (draft steps, 0 for
        plain decoding), as the C(gpuops.sglang.sglang_plan) action's C(tune.modes) lists them.
    type: list
    elements: dict
    required: true
  measured:
    description: The M(gpuops.sglang.sglang_benchmark) result of each mode, by its name.
    type: dict
    required: true
  configured_steps:
    description: The server's configured draft steps (C(sglang_speculative_num_steps)).
    type: int
    required: true
  configured_draft_tokens:
    description: The server's configured draft tokens (C(sglang_speculative_num_draft_tokens)).
    type: int
    required: true
  dynamic_mode:
    description:
      - The host's C(sglang_dynamic_spec_mode), which the vars file is written for - V(env) (the patch reads the
        threshold; the vars file pins the steps it was measured with) or V(adaptive) (the release reads the tiers,
        with the steps they need). Where plain decoding was ahead at every level the vars file turns speculation off.
    type: str
    choices: [env, adaptive]
    default: env
  report_dir:
    description: The controller's folder for the table and the vars file (made if missing).
    type: path
    required: true
  settings:
    description: What the levels were measured with (levels, requests, tokens), kept in the table.
    type: dict
    default: {}
  measured_at:
    description: When the measurement began (kept in the table and the vars file's comment).
    type: str
    default: ""
'''

EXAMPLES = r'''
- name: Recommend where drafting stops from the two modes measured
  gpuops.sglang.sglang_speculation:
    host: gpu2
    modes: [{name: plain, steps: 0}, {name: eagle3, steps: 3}]
    measured: {plain: "{{ plain_benchmark }}", eagle3: "{{ eagle3_benchmark }}"}
    configured_steps: 3
    configured_draft_tokens: 4
    report_dir: /var/tmp/gpuops-reports
  register: tuned
'''

RETURN = r'''
levels:
  description: One row per concurrency level.
  returned: always
  type: list
  elements: dict
  contains:
    concurrency:
      description: The level.
      type: int
    plain:
      description:
        - Plain decoding's C(output_tok_s), C(itl_p95_s) and C(ttft_p95_s) at this level (null where it timed out);
          every other mode of O(modes) has the same key under its name (V(eagle3), V(eagle3_steps_K)).
      type: dict
recommended:
  description: The recommendation.
  returned: always
  type: dict
  contains:
    threshold:
      description: The batch size from which plain decoding serves at least as fast as EAGLE-3; null when it never does.
      type: int
    adaptive_config:
      description: C(--speculative-adaptive-config) tiers, by batch size, each C(candidate_steps) (null when no mode drafts).
      type: dict
    num_steps:
      description: The C(--speculative-num-steps) the tiers need among theirs (null without tiers).
      type: int
    best:
      description: The fastest mode at each level.
      type: list
      elements: dict
      contains:
        concurrency:
          description: The level.
          type: int
        mode:
          description: The fastest mode's name.
          type: str
        steps:
          description: Its draft steps (0 for plain decoding).
          type: int
    notes:
      description: What the table says beside the numbers (a second crossing, a level that timed out).
      type: list
      elements: str
    compared:
      description: How many levels compared plain decoding with EAGLE-3 (the action fails when none did).
      type: int
    never_draft:
      description: Whether plain decoding was ahead at every level (the vars file then turns speculation off).
      type: bool
vars:
  description: The role variables that apply the recommendation (the vars file's content).
  returned: always
  type: dict
file:
  description: The table's path on the controller.
  returned: always
  type: str
vars_file:
  description: The vars file's path on the controller.
  returned: always
  type: str
command:
  description: The command that applies the recommendation (a redeploy of the host with the vars file and the performance gate).
  returned: always
  type: str
table:
  description:
    - The table as text lines, then the notes, the table's path and the command that applies it; also published as
      the C(sglang_speculation) custom stats (by host), which the C(gpuops.sglang.concise) callback prints.
  returned: always
  type: list
  elements: str
'''
