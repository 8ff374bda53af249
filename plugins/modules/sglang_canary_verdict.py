#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_canary_verdict
short_description: (internal to the sglang role) The canary bake's verdict, a canary's live figures against the baseline servers'
version_added: 0.4.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - Compares what the canary served during its bake with what the baseline servers served over the same window
    (an M(gpuops.sglang.sglang_canary_bake) result), as automated canary analysis does - the error rate, and the
    p95 of time to first token, inter-token latency and end-to-end latency, each read from SGLang's histograms.
  - A latency fails when the canary's p95 exceeds the baseline's by more than O(latency_tolerance) and, where
    both sides have enough samples, a one-sided Mann-Whitney U test over the buckets finds the canary slower at
    O(alpha); the error rate fails when it exceeds the baseline's by more than O(error_tolerance). Fewer than
    O(min_requests) on either side, no baseline, or a canary without figures make the verdict V(inconclusive);
    so do figures that are not finite numbers or add up past a float's range, named in the reason.
  - Fails when the verdict is V(fail), or V(inconclusive) with O(inconclusive=rollback), so that the
    C(gpuops.sglang.sglang) role's window rolls the canary back; RV(bake) is returned either way.
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.CONTROLLER_DECISION
options:
  bake:
    description: The M(gpuops.sglang.sglang_canary_bake) result.
    type: dict
    required: true
  min_requests:
    description: Requests each side must have served for a verdict other than V(inconclusive).
    type: int
    default: 20
  latency_tolerance:
    description: Fraction by which the canary's p95 latencies may exceed the baseline's.
    type: float
    default: 0.25
  error_tolerance:
    description: Share (0 to 1) by which the canary's error rate may exceed the baseline's.
    type: float
    default: 0.02
  alpha:
    description: Significance level of the rank test that must confirm a latency beyond the tolerance.
    type: float
    default: 0.01
  before:
    description:
      - The M(gpuops.sglang.sglang_canary_bake) result of the canary's own old server, read under its live traffic
        before the redeploy; the baseline when O(bake) has no baseline server with figures (a fleet of one).
    type: dict
  inconclusive:
    description:
      - What an inconclusive bake does. V(rollback) fails the task (the canary is rolled back); V(hold) keeps the
        canary and RV(bake.action) says V(held), which stops the rollout after the canary's batch; V(pass) keeps
        the canary and the rollout goes on.
    type: str
    choices: [rollback, hold, pass]
    default: rollback
'''

EXAMPLES = r'''
- name: Judge the canary's bake, holding the rollout when the traffic was too light to say
  gpuops.sglang.sglang_canary_verdict:
    bake: "{{ bake }}"
    inconclusive: hold
  register: verdict
'''

RETURN = r'''
verdict:
  description: V(pass), V(fail) or V(inconclusive).
  returned: always
  type: str
bake:
  description: The report's C(bake) block.
  returned: always
  type: dict
  contains:
    verdict:
      description: V(pass), V(fail) or V(inconclusive).
      type: str
    reason:
      description: What failed and by how much, what passed, or why nothing could be said.
      type: str
    action:
      description: V(kept), V(rolled_back) or V(held).
      type: str
    canary:
      description:
        - The canary's C(requests), C(errors), C(error_rate), C(ttft_p95_s), C(itl_p95_s), C(e2e_p95_s), and
          C(ttft_mean_s), C(itl_mean_s), C(e2e_mean_s) (exact, from the histograms' sums; null where not exported).
      type: dict
    baseline:
      description: The baseline servers' same figures, merged (null without a baseline).
      type: dict
    baseline_servers:
      description: How many servers made the baseline.
      type: int
    baseline_source:
      description:
        - V(peers) (the servers on the previous version, over the same window), V(before) (the canary's own old
          server, before the redeploy), or null (no baseline).
      type: str
    seconds:
      description: How long the bake held.
      type: float
'''
