# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Builds a host's redeploy report from what the run registered, and writes it on the controller and into
the run's artifacts, in-process.

Without O(report), the report is built from the role's registered results (plugin_utils/_report.py,
unit-tested there): the final one, or with O(stage) V(opened) the one a run cut off inside its
outage window leaves. With O(stage) V(group), once every node of a server group has its final report
(the fact `sglang_redeploy_report`), a node's report gains its group's outcome, read from the other
nodes' reports through hostvars, and is written again. An action plugin rather than `copy` delegated to localhost: the report is written twice a run per
host (as the window opens, and at the end), and a module round trip to localhost cost about a second
each time, on the no-op path too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.module_utils._files import write_atomic
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _report
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import rendered

STATS_KEY = 'sglang_redeploy'
# The report's names for the role's registered results and notes (a step that never ran leaves none).
RESULTS = {
    'stop': '_sglang_stop', 'killed': '_sglang_killed', 'released': '_sglang_released', 'started': '_sglang_started',
    'patched': '_sglang_patched', 'router_before': '_sglang_router_before', 'router_removed': '_sglang_router_removed',
    'router_readmitted': '_sglang_router_readmitted', 'rollback': '_sglang_rollback', 'slot': '_sglang_slot',
    'takeover': '_sglang_takeover', 'gpu_probe': '_sglang_gpu_probe', 'after_failure': '_sglang_after_failure',
    'state': '_sglang_state', 'failure': '_sglang_failure', 'run_id': '_sglang_run_id',
    'window_opened': '_sglang_window_opened', 'skip_reason': '_sglang_skip_reason', 'decision': '_sglang_decision',
    'plan': '_sglang_plan', 'performance': '_sglang_performance', 'group_decision': '_sglang_group_decision',
}
SETTINGS = ('sglang_patch_file', 'sglang_router_url', 'sglang_rollback_deadline', 'sglang_rollback_idle',
            'inventory_hostname', 'sglang_perf_gate')


def write_report(folder, host, report):
    """HOST.json (and HOST.last-redeploy.json after a redeploy) in folder, each replaced atomically; their paths."""
    names = [host + '.json']
    if report.get('status') == 'redeployed':
        names.append(host + '.last-redeploy.json')
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    data = to_bytes(json.dumps(report, indent=4, sort_keys=True, default=str) + '\n')
    paths = [os.path.join(folder, name) for name in names]
    for path in paths:
        write_atomic(path, data, mode=0o644, durable=False)
    return paths


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        validation, args = self.validate_argument_spec(argument_spec=dict(
            report=dict(type='dict'),
            stage=dict(type='str', default='final', choices=['final', 'opened', 'group']),
            report_dir=dict(type='str', default=''),
            host=dict(type='str', required=True),
        ))
        folder, host = args['report_dir'], args['host']
        report = args['report']
        if report is None:
            report = self._group(task_vars) if args['stage'] == 'group' else self._build(args['stage'], task_vars)
        written, write_error = [], None
        # A check-mode run describes what would happen; it must not replace the last real report. A single-node
        # server's report has no group outcome to add: the group stage leaves its file alone.
        if folder and not self._task.check_mode and (args['stage'] != 'group' or report.get('group') is not None):
            try:
                written = write_report(folder, host, report)
            except (IOError, OSError) as exc:
                write_error = 'could not write the report of %s to %s: %s' % (host, folder, to_native(exc))
                # The window-open report stands in for a stale success: without it the window must not open.
                if args['stage'] == 'opened':
                    raise AnsibleActionFail(write_error)
                # The final one: the report is still returned and published (the fleet's gate reads it, the
                # slot is given back); the role fails the host for it afterwards.
                result['warnings'] = [write_error]
        result.update(changed=False, written=written, write_error=write_error, report=report,
                      ansible_stats={'data': {STATS_KEY: {host: report}}, 'aggregate': True, 'per_host': False})
        return result

    def _group(self, task_vars):
        """This node's final report with its group's outcome, from every node's report (through hostvars)."""
        found = rendered(self._templar, task_vars, ['sglang_redeploy_report', '_sglang_plan', 'inventory_hostname'],
                         {'sglang_redeploy_report': None, '_sglang_plan': None})
        own = found['sglang_redeploy_report']
        if own is None:
            raise AnsibleActionFail('stage group reads this host\'s final report (sglang_redeploy_report): run it '
                                    'after every node has its report')
        nodes = ((found['_sglang_plan'] or {}).get('group') or {}).get('nodes') or []
        hostvars = task_vars.get('hostvars') or {}
        return _report.with_group_outcome(own, [
            (name, own if name == found['inventory_hostname']
             else self._templar.template((hostvars.get(name) or {}).get('sglang_redeploy_report')))
            for name in nodes])

    def _build(self, stage, task_vars):
        found = rendered(self._templar, task_vars, list(RESULTS.values()) + list(SETTINGS),
                         # A play from before the gate (no sglang_perf_gate) reports it off.
                         dict([(name, None) for name in RESULTS.values()] + [('sglang_perf_gate', False)]))
        run = dict((key, found[name]) for key, name in RESULTS.items())
        decision, state = run.pop('decision') or {}, run['state'] or {}
        plan = run.pop('plan') or {}
        # A node of a server group was decided with its group: its reasons name the node they come from.
        group_decision = run.pop('group_decision') or {}
        if 'reasons' in group_decision:
            decision = dict(decision, reasons=group_decision['reasons'],
                            redeploy_needed=group_decision.get('redeploy_needed', False))
        run.update(group=plan.get('group'), check_mode=bool(task_vars.get('ansible_check_mode')), manager=state.get('service_manager'),
                   reasons=decision.get('reasons', []), redeploy_needed=decision.get('redeploy_needed', False),
                   patch_state=decision.get('patch_state', {}))
        settings = {'host': found['inventory_hostname'], 'patch_file': found['sglang_patch_file'],
                    'router_url': found['sglang_router_url'], 'rollback_deadline': found['sglang_rollback_deadline'],
                    'rollback_idle': found['sglang_rollback_idle'], 'perf_gate': found['sglang_perf_gate']}
        if stage == 'opened':
            opened_at = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return _report.window_open(run, settings, opened_at, plan['paths']['guard_dir'])
        return _report.report(run, settings)
