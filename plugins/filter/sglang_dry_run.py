# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: sglang_dry_run
short_description: (internal) What a check run found the outage window would end and change
version_added: 0.4.0
description:
  - Used by the role's dry run (C(--check)); internal to the collection.
  - From the check-mode results of the window's steps that end processes (the stop's RV(gpuops.sglang.sglang_server#module:would_stop),
    the RV(gpuops.sglang.pct_exec_kill#module:targets) of the container kill and the
    RV(gpuops.sglang.gpu_release#module:targets) of the GPU release) and the live launch configuration, builds what
    the report and the printed plan say - V(would_kill) (per step - pid, user, cmdline, gpus), V(flag_changes)
    (flag, live, wanted), V(deadline) and V(lines) (one sentence each).
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: The check-mode result of M(gpuops.sglang.sglang_server) with O(gpuops.sglang.sglang_server#module:state=stopped).
    type: dict
    required: true
  container:
    description: The check-mode result of M(gpuops.sglang.pct_exec_kill); null or empty where the host is no container.
    type: dict
  release:
    description: The check-mode result of M(gpuops.sglang.gpu_release).
    type: dict
  live_launch:
    description:
      - The live launch configuration, as M(ansible.builtin.slurp) read it (base64 in C(content)); null or a result
        without content where there is none.
    type: dict
  wanted_args:
    description: The server's argv after C(-m MODULE) the window would write (the plan's C(args)).
    type: list
    elements: str
    required: true
  deadline:
    description: The guard's bounds, C(deadline_s) and C(idle_s).
    type: dict
    required: true
'''

EXAMPLES = r'''
- name: Work out what the window would do
  ansible.builtin.set_fact:
    dry_run: >-
      {{ stop_probe | gpuops.sglang.sglang_dry_run(container=container_probe, release=gpu_probe,
           live_launch=live_launch, wanted_args=plan.args, deadline={'deadline_s': 900, 'idle_s': 120}) }}
'''

RETURN = r'''
_value:
  description: V(would_kill) (V(stop), V(kill), V(gpu_release) - each a list), V(flag_changes), V(deadline), V(lines).
  type: dict
'''

import base64
import binascii
from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._dry_run import dry_run


def _text(slurped: dict[str, Any]) -> str | None:
    try:
        return base64.b64decode((slurped or {}).get('content') or '').decode('utf-8', 'replace') or None
    except (binascii.Error, ValueError):
        return None


def sglang_dry_run(stop: dict[str, Any], container: dict[str, Any] | None = None, release: dict[str, Any] | None = None,
                   live_launch: dict[str, Any] | None = None, wanted_args: list[str] = (),
                   deadline: dict[str, int] | None = None) -> dict[str, Any]:
    return dry_run(stop, container, release, _text(live_launch), list(wanted_args or []), deadline or {})


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'sglang_dry_run': sglang_dry_run}
