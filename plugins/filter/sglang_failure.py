# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: sglang_failure
short_description: One line saying which step failed and why, for a rescue to record
version_added: 0.3.0
description:
  - "Turns a rescue's C(ansible_failed_task) and C(ansible_failed_result) into C(STEP: MESSAGE): the failed
    task's name (V(a step) without one) and its C(msg) (V(failed) without one), whitespace folded to single
    spaces and cut to O(limit) characters, as the report's C(reason) carries it."
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: The failed task (C(ansible_failed_task)).
    type: dict
    required: true
  result:
    description: Its result (C(ansible_failed_result)).
    type: dict
    required: true
  limit:
    description: At most this many characters of the message.
    type: int
    default: 600
'''

EXAMPLES = r'''
- name: Note what failed
  ansible.builtin.set_fact:
    failure: "{{ ansible_failed_task | gpuops.sglang.sglang_failure(ansible_failed_result) }}"
'''

RETURN = r'''
_value:
  description: "C(STEP: MESSAGE) on one line."
  type: str
'''

from typing import Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._report import failure_note


def sglang_failure(task: dict[str, str], result: dict[str, str], limit: int = 600) -> str:
    return failure_note(task, result, limit)


class FilterModule:
    def filters(self) -> dict[str, Callable]:
        return {'sglang_failure': sglang_failure}
