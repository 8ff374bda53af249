# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The window's barrier for a server across several hosts: every node fails here when any node failed a step
since the last barrier, so that every node's rescue rolls back (plugin_utils/_groups.py, unit-tested there).

On the controller, in-process: the group is an argument; through hostvars, under the names the task gives, the
barrier each node said it got to (O(said), set by the task before) and its registered step results (O(results),
for the message); and which nodes are still in the play's batch.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _groups, _steps
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import registered_of

# The barriers before the window opens (tasks/main.yml).
BEFORE_THE_WINDOW = ('ready',)
ARGUMENT_SPEC = dict(
    step=dict(type='str', required=True),
    group=dict(type='dict'),
    host=dict(type='str', required=True),
    said=dict(type='str', required=True),
    results=dict(type='list', elements='str'),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        group = args['group']
        server = 'the whole server group %s' % group['name'] if group else 'the server'
        group = group or {'nodes': [args['host']]}
        names = _steps.window_results() if args['results'] is None else args['results']
        results = registered_of(task_vars, group['nodes'], names)
        # The batch's active hosts: a node that failed outside a rescue, or became unreachable, is no longer there.
        play_hosts = task_vars.get('ansible_play_batch') or []
        said = {host: names.get(args['said'])
                for host, names in registered_of(task_vars, group['nodes'], [args['said']]).items()}
        stopped = _groups.barrier(group['nodes'], play_hosts, results, said, args['step'])
        result.update(changed=False, failed_nodes=stopped['failed_nodes'])
        if stopped['failed_nodes']:
            # Before the window nothing was touched: the group stops as it is; inside it, every node rolls back.
            what = 'stops untouched' if args['step'] in BEFORE_THE_WINDOW else 'rolls back'
            result.update(failed=True, msg='%s; %s %s (%s stops here).'
                          % (stopped['msg'], server, what, args['host']))
        return result
