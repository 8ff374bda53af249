# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from typing import Any, Callable

DOCUMENTATION = r'''
name: sglang_kill_lines
short_description: One readable line per process a kill module signalled
version_added: 0.2.0
description:
  - Turns the RV(gpuops.sglang.gpu_release#module:killed) list of M(gpuops.sglang.gpu_release) or M(gpuops.sglang.pct_exec_kill) into lines
    such as V(sglang::scheduler_TP0 <- SIGTERM) for reports.
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: A list of dicts with C(cmdline) and C(signal).
    type: list
    elements: dict
    required: true
'''

EXAMPLES = r'''
- name: Show what gpu_release killed
  ansible.builtin.debug:
    msg: "{{ released.killed | gpuops.sglang.sglang_kill_lines }}"
'''

RETURN = r'''
_value:
  description: One line per process.
  type: list
  elements: str
'''


# The report's own lines (plugin_utils/_report.py): the filter and the report never word a kill differently.
from ansible_collections.gpuops.sglang.plugins.plugin_utils._report import kill_lines


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'sglang_kill_lines': kill_lines}
