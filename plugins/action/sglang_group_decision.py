# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One decision for a server across several hosts, taken on each of its nodes alike: any node's reason redeploys
every node (plugin_utils/_groups.py, unit-tested there).

On the controller, in-process: this host's group, gate and decision are arguments; every node's plan, gathered state
and decision are read through hostvars under the names the task gives (O(from_nodes)), since a task's arguments
cannot hold what another host registered. A single-node server keeps its own decision.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _groups
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import registered_of

ARGUMENT_SPEC = dict(
    # Not the whole plan: it holds the rendered files (keys, the secret environment), which task arguments would show.
    group=dict(type='dict'),
    left_alone_because=dict(type='str', default=''),
    decision=dict(type='dict', default={}),
    host=dict(type='str', required=True),
    from_nodes=dict(type='dict', required=True, options=dict(
        plan=dict(type='str', required=True),
        state=dict(type='str', required=True),
        decision=dict(type='str', required=True),
    )),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        group = args['group']
        result.update(changed=False, problems=[], nodes=list(group['nodes']) if group else [args['host']])
        # A node left alone (skip flag, canary, budget) takes no part: it keeps its own (absent) decision and the
        # group's other nodes refuse it.
        if not group or args['left_alone_because']:
            own = args['decision'] or {}
            result.update(redeploy_needed=own.get('redeploy_needed', False), reasons=own.get('reasons', []))
            return result
        names = args['from_nodes']
        registered = registered_of(task_vars, group['nodes'], [names[key] for key in _groups.DECIDED_ON])
        registered = {host: {key: found[names[key]] for key in _groups.DECIDED_ON}
                      for host, found in registered.items()}
        nodes, problems = _groups.decided_nodes(group, registered, names)
        decision = _groups.group_decision(nodes) if not problems else {'redeploy_needed': False, 'reasons': []}
        problems += decision.get('problems', [])
        result.update(redeploy_needed=decision['redeploy_needed'], reasons=decision['reasons'], problems=problems)
        if problems:
            result.update(failed=True, msg='the server group %s is refused, nothing was touched: %s'
                          % (group['name'], ' '.join(problems)))
        return result
