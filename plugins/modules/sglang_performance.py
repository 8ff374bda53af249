#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_performance
short_description: (internal to the sglang role) The performance gate's verdict, a new server's benchmark against the old one's
version_added: 0.3.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - Compares, level by level, the M(gpuops.sglang.sglang_benchmark) result of a new server (O(after)) with a
    baseline, the old server's (O(before)), or with O(baseline=stored) the C(after) figures of the host's last
    redeploy report (O(report_dir)/<host>.last-redeploy.json).
  - A level fails when its output tokens per second drop by more than O(throughput_tolerance), its p95
    inter-token latency rises by more than O(itl_tolerance) (fractions of the baseline), any of its requests
    failed, or it is missing or ran out of time on the new server. A level the baseline cannot speak for is
    not compared, and RV(performance.reason) says so; with no level compared the verdict is V(skipped).
  - Fails when the verdict is V(fail), its msg naming each regressed level and by how much, so that the
    C(gpuops.sglang.sglang) role's window rolls back; RV(performance) is returned either way.
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.CONTROLLER_DECISION
options:
  levels:
    description: The concurrency levels judged.
    type: list
    elements: int
    required: true
  after:
    description: The new server's M(gpuops.sglang.sglang_benchmark) result.
    type: dict
    required: true
  before:
    description:
      - The old server's M(gpuops.sglang.sglang_benchmark) result (with O(baseline=measure)). A failed or
        unmeasured one is no baseline, and the reason says why.
    type: dict
  baseline:
    description: Where the baseline comes from.
    type: str
    choices: [measure, stored]
    default: measure
  report_dir:
    description: The controller folder of the reports (with O(baseline=stored)).
    type: str
    default: ''
  host:
    description: The host whose last redeploy report holds the stored baseline.
    type: str
    default: ''
  throughput_tolerance:
    description: Fraction by which a level's output tokens per second may drop.
    type: float
    required: true
  itl_tolerance:
    description: Fraction by which a level's p95 inter-token latency may rise.
    type: float
    required: true
'''

EXAMPLES = r'''
- name: Judge the new server against the old one
  gpuops.sglang.sglang_performance:
    levels: [1, 16]
    before: "{{ old_benchmark }}"
    after: "{{ new_benchmark }}"
    throughput_tolerance: 0.15
    itl_tolerance: 0.25
  register: gate
'''

RETURN = r'''
verdict:
  description: V(pass), V(fail) or V(skipped).
  returned: always
  type: str
performance:
  description: The report's C(performance) block.
  returned: always
  type: dict
  contains:
    verdict:
      description: V(pass), V(fail) or V(skipped).
      type: str
    reason:
      description: Each regressed level and by how much, or what passed, or why nothing was compared.
      type: str
    baseline:
      description: V(measure) or V(stored).
      type: str
    levels:
      description: One entry per level judged.
      type: list
      elements: dict
      contains:
        concurrency:
          description: The level.
          type: int
        before:
          description: The baseline's C(output_tok_s), C(ttft_p95_s), C(itl_p95_s) and C(errors) (null without one).
          type: dict
        after:
          description: The new server's same four figures (null when the level was not measured).
          type: dict
    metrics:
      description: The servers' own Prometheus figures, C(before) and C(after) (null where not exported).
      type: dict
    elapsed_s:
      description: Seconds each benchmark took, C(before) and C(after).
      type: dict
'''
