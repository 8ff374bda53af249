# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One decision for a server across several hosts, taken on each of its nodes alike: any node's reason redeploys
every node (plugin_utils/_groups.py, unit-tested there).

On the controller, in-process: reads this host's plan (_sglang_plan) for the group, then every node's plan,
gathered state and decision (_sglang_plan, _sglang_state, _sglang_decision) through hostvars. A single-node
server keeps its own decision.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _groups
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import registered_of, rendered


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        self.validate_argument_spec(argument_spec={})
        found = rendered(self._templar, task_vars, ('_sglang_plan', '_sglang_decision', 'inventory_hostname'),
                         {'_sglang_decision': {}})
        plan = found['_sglang_plan']
        group = plan.get('group')
        result.update(changed=False, problems=[], nodes=list(group['nodes']) if group else [found['inventory_hostname']])
        # A node left alone (skip flag, canary, budget) takes no part: it keeps its own (absent) decision and the
        # group's other nodes refuse it.
        if not group or plan.get('left_alone_because'):
            own = found['_sglang_decision']
            result.update(redeploy_needed=own.get('redeploy_needed', False), reasons=own.get('reasons', []))
            return result
        nodes, problems = _groups.decided_nodes(group, registered_of(task_vars, group['nodes'], _groups.DECIDED_ON))
        decision = _groups.group_decision(nodes) if not problems else {'redeploy_needed': False, 'reasons': []}
        problems += decision.get('problems', [])
        result.update(redeploy_needed=decision['redeploy_needed'], reasons=decision['reasons'], problems=problems)
        if problems:
            result.update(failed=True, msg='the server group %s is refused, nothing was touched: %s'
                          % (group['name'], ' '.join(problems)))
        return result
