# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether this host's server is redeployed, from what sglang_server_info and the patch's dry run found.

On the controller, in-process, from its arguments alone: what the plan (sglang_plan) says of the server's mode and
files, the gathered state (sglang_server_info's result) and the patch's dry run (sglang_patch's, absent when the
stamp proved the patch).
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _colocated, _configs, _decision
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import registered_of

# What the decision reads: each an argument, so that the role's names for its results stay the role's own.
# Not the whole plan: it holds the rendered files (keys, the secret environment), which task arguments would show.
ARGUMENT_SPEC = dict(
    adaptive=dict(type='bool', required=True),
    files=dict(type='list', elements='dict', required=True),
    state=dict(type='dict', required=True),
    patch_check=dict(type='dict', default={}),
    force_restart=dict(type='bool', default=False),
    patch_file=dict(type='str', default=''),
    python=dict(type='str', required=True),
    host=dict(type='str', required=True),
    router_url=dict(type='str', default=''),
    # The plan's `colocated` (a server sharing its machine, docs/colocated.md), and the name under which every play
    # host registered its state read: their machines are read through hostvars.
    colocated=dict(type='dict', default={}),
    state_from=dict(type='str', default=''),
    # An undo run's plan (sglang_revisions state=planned's `undo`; playbooks/undo.yml): null for a redeploy.
    undo=dict(type='dict'),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        # A skipped dry run (the stamp proved the patch, or there is none to apply) registers {'skipped': True}.
        state, patch_check = args['state'], args['patch_check'] or {}
        problem = _decision.host_problems(state, args['python'], args['host'], args['adaptive'])
        if problem:
            result.update(failed=True, msg=problem)
            return result
        patch = _decision.patch_state(state, patch_check, args['patch_file'])
        patch_due = _decision.patch_due(args['patch_file'], patch)
        colocated = self._colocated(args, state, patch_due, task_vars)
        problem = colocated.pop('problem')
        if problem:
            result.update(failed=True, msg=problem)
            return result
        owed = _decision.readmission_owed(state, args['router_url'])
        reasons = _decision.reasons(state, patch_check, args['force_restart'], owed)
        pairs = _configs.pairs(args['files'], state['service_manager'])
        changed = list(state.get('configs_changed', []))
        decided = dict(
            changed=False, manager=state['service_manager'], reasons=reasons, redeploy_needed=bool(reasons),
            changed_configs=changed, patch_state=patch, patch_due=patch_due, colocated=colocated,
            # What the window writes and moves into place: only the changed files.
            writes=[pair for pair in pairs if pair['label'] in changed],
            # Every file the server runs from (the speculation tuner writes each mode's whole configuration).
            pairs=pairs,
            guard_files=_decision.guard_files(pairs, patch),
            readmission_owed=owed,
        )
        result.update(_decision.undo(decided, args['undo'], pairs))
        return result

    @staticmethod
    def _colocated(args: dict[str, Any], state: dict[str, Any], patch_due: bool,
                   task_vars: dict[str, Any]) -> dict[str, Any]:
        """_colocated.decide over the machines of this server's neighbours in the play that have read theirs (the
        others are confirmed by the inventory alone); `problem` is True and `why` says it when refused."""
        play = list(task_vars.get('ansible_play_hosts_all') or [])
        me = args['host']
        machines = {}
        if args['state_from']:
            others = [host for host in play if host != me]
            for host, found in registered_of(task_vars, others, [args['state_from']]).items():
                read = found[args['state_from']]
                if isinstance(read, dict) and read.get('machine'):
                    machines[host] = read['machine']
        # An undo applies no patch (its decision says so below): what it writes is its revision's files.
        undo_files = [entry['path'] for entry in args['undo'].get('files') or []] if args['undo'] else None
        return _colocated.decide(me, args['colocated'] or {}, state, machines, play, patch_due, undo_files)
