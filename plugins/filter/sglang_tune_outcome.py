# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: sglang_tune_outcome
short_description: What a stopped speculation tuning run left on its host, in one sentence
version_added: 0.4.0
description:
  - For the rescue of C(playbooks/tune_speculation.yml) - nothing stopped (the guard was never armed), the previous
    server restored (healthy, and back in its router where it was in one), not restored yet, or restored only in
    part; the last two name C(playbooks/rollback.yml --limit HOST), which finishes it.
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: The host's inventory name.
    type: str
    required: true
  armed:
    description: Whether the run armed the guard.
    type: bool
    required: true
  fired:
    description: This run's restore, the M(gpuops.sglang.sglang_guard) RV(gpuops.sglang.sglang_guard#module:fired) report (null when none was done).
    type: dict
  was_in_router:
    description: Whether the host was in a router before the run.
    type: bool
    required: true
'''

EXAMPLES = r'''
- name: Say what the guard did
  ansible.builtin.debug:
    msg: "{{ inventory_hostname | gpuops.sglang.sglang_tune_outcome(true, restore.fired, true) }}"
'''

RETURN = r'''
_value:
  description: One sentence.
  type: str
'''

from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._speculation import restore_outcome


def sglang_tune_outcome(host: str, armed: Any, fired: Any, was_in_router: Any) -> dict[str, Any]:
    return restore_outcome(host, armed, fired, was_in_router)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'sglang_tune_outcome': sglang_tune_outcome}
