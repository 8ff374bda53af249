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

from __future__ import annotations

import datetime
import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import write_atomic
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _report, _steps

STATS_KEY = 'sglang_redeploy'
# The fact in which every host keeps its final report (tasks/report.yml), read from the group's other nodes.
REPORT_FACT = 'sglang_redeploy_report'
SETTINGS = dict(
    patch_file=dict(type='str', default=''),
    router_url=dict(type='str', default=''),
    # As given: the report's messages quote them.
    rollback_deadline=dict(type='raw', required=True),
    rollback_idle=dict(type='raw', required=True),
    perf_gate=dict(type='bool', default=False),
    guard_dir=dict(type='str', default=''),
    # The plan's expected /server_info and environment: the report's verified_settings where the run saw them.
    server_info=dict(type='dict', default={}),
    environment=dict(type='dict', default={}),
    dynamic_spec_env_read_by=dict(type='str', default=''),
)
ARGUMENT_SPEC = dict(
    report=dict(type='dict'),
    stage=dict(type='str', default='final', choices=['final', 'opened', 'group']),
    report_dir=dict(type='str', default=''),
    host=dict(type='str', required=True),
    # Typed by the step table: a key it does not name (a typo) is refused, not read as a step that never ran.
    run=dict(type='dict', default={}, options={key: dict(type='raw') for key in _steps.run_keys()}),
    settings=dict(type='dict', options=SETTINGS),
    group=dict(type='dict'),
)


def write_report(folder: str, host: str, report: dict[str, Any]) -> list[str]:
    """report_files() in folder, each replaced atomically; their paths."""
    names = _report.report_files(host, report.get('status'))
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

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        folder, host = args['report_dir'], args['host']
        report = args['report']
        if args['stage'] == 'group':
            report = self._group(args, task_vars)
        elif report is None:
            report = self._build(args)
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

    def _group(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """This node's final report (O(report)) with its group's outcome, from every node's report (the fact
        REPORT_FACT, through hostvars)."""
        own = args['report']
        if own is None:
            raise AnsibleActionFail('stage group takes this host\'s final report (report): run it after every node has'
                                    ' its report')
        nodes = (args['group'] or {}).get('nodes') or []
        hostvars = task_vars.get('hostvars') or {}
        return _report.with_group_outcome(own, [
            (name, own if name == args['host']
             else self._templar.template((hostvars.get(name) or {}).get(REPORT_FACT)))
            for name in nodes])

    def _build(self, args: dict[str, Any]) -> dict[str, Any]:
        if args['settings'] is None:
            raise AnsibleActionFail('building the report takes the run\'s settings (settings)')
        run = _report.run_of(args['run'], bool(self._task.check_mode))
        settings = dict(args['settings'], host=args['host'])
        if args['stage'] == 'opened':
            opened_at = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return _report.window_open(run, settings, opened_at, settings['guard_dir'])
        return _report.report(run, settings)
