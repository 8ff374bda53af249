# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: sglang_run
short_description: (internal to the sglang role) What the role's steps registered, under the step table's run keys
version_added: 0.3.0
description:
  - Internal to the C(gpuops.sglang.sglang) role; the step table (C(plugin_utils/_steps.py)) names, for each step,
    the variables its tasks register and the run keys the report reads them under.
  - Returns one dict, run key -> what the step registered, or null where it did not run (the
    O(gpuops.sglang.sglang_report#module:run) of M(gpuops.sglang.sglang_report)), so that a step added to the table
    reaches the report without a list kept by hand.
  - A step whose own task was skipped because a later step's task did its work (the table's C(carried_by), a
    single-node server's start releasing its GPUs) is read from that task's result.
author:
  - gpuops.sglang maintainers (@gpuops)
'''

EXAMPLES = r'''
- name: Write the report of what the steps registered
  gpuops.sglang.sglang_report:
    run: "{{ lookup('gpuops.sglang.sglang_run') }}"
    host: "{{ inventory_hostname }}"
'''

RETURN = r'''
_raw:
  description: The run, one dict.
  type: list
  elements: raw
'''

from typing import Any

from ansible.plugins.lookup import LookupBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _steps


class LookupModule(LookupBase):

    def run(self, terms: list, variables: dict | None = None, **kwargs) -> list:
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        run = {}
        for key, name in _steps.run_sources().items():
            run[key] = self.value(variables, name)
        for key, (name, inner) in _steps.carried().items():
            # The step's own task skipped: a later step's task did its work (a single-node start's release).
            if not run[key] or run[key].get('skipped'):
                run[key] = (self.value(variables, name) or {}).get(inner) or run[key]
        return [run]

    def value(self, variables: dict, name: str) -> Any:
        # A vars/main.yml name is a template of its own; a registered result or a fact is already a value.
        return self._templar.template(variables[name]) if name in variables else None
