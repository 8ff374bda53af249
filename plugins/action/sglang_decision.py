# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether this host's server is redeployed, from what sglang_server_info and the patch's dry run found.

On the controller, in-process: it reads the plan (sglang_plan, registered as _sglang_plan), the gathered
state (_sglang_state) and the dry run (_sglang_patch_check) from the task variables.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _configs, _decision
from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import rendered


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        self.validate_argument_spec(argument_spec={})
        # The dry run's result is absent when the stamp proved the patch (or there is none to apply).
        found = rendered(self._templar, task_vars, ('_sglang_plan', '_sglang_state', '_sglang_patch_check',
                                                    'sglang_force_restart', 'sglang_patch_file', 'sglang_python',
                                                    'inventory_hostname'), {'_sglang_patch_check': {}})
        plan, state, patch_check = found['_sglang_plan'], found['_sglang_state'], found['_sglang_patch_check']
        problem = _decision.host_problems(state, found['sglang_python'], found['inventory_hostname'], plan['adaptive'])
        if problem:
            result.update(failed=True, msg=problem)
            return result
        patch = _decision.patch_state(state, patch_check, found['sglang_patch_file'])
        reasons = _decision.reasons(state, patch_check, as_bool(found['sglang_force_restart']))
        pairs = _configs.pairs(plan['files'], state['service_manager'])
        changed = list(state.get('configs_changed', []))
        result.update(
            changed=False, manager=state['service_manager'], reasons=reasons, redeploy_needed=bool(reasons),
            changed_configs=changed, patch_state=patch, patch_due=_decision.patch_due(found['sglang_patch_file'], patch),
            # What the window writes and moves into place: only the changed files.
            writes=[pair for pair in pairs if pair['label'] in changed],
            guard_files=_decision.guard_files(pairs, patch),
        )
        return result
