# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Builds a host's redeploy report from what the run registered, and writes it on the controller and into
the run's artifacts, in-process.

Without O(report), the report is built from the role's registered results (plugin_utils/_report.py,
unit-tested there): the final one, or with O(stage) V(opened) the one a run cut off inside its
outage window leaves. An action plugin rather than `copy` delegated to localhost: the report is written twice a run per
host (as the window opens, and at the end), and a module round trip to localhost cost about a second
each time, on the no-op path too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

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
    'plan': '_sglang_plan',
}
SETTINGS = ('sglang_patch_file', 'sglang_router_url', 'sglang_rollback_deadline', 'sglang_rollback_idle',
            'inventory_hostname')


def write_atomic(path, text):
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        validation, args = self.validate_argument_spec(argument_spec=dict(
            report=dict(type='dict'),
            stage=dict(type='str', default='final', choices=['final', 'opened']),
            report_dir=dict(type='str', default=''),
            host=dict(type='str', required=True),
        ))
        folder, host = args['report_dir'], args['host']
        report = args['report']
        if report is None:
            report = self._build(args['stage'], task_vars)
        written = []
        # A check-mode run describes what would happen; it must not replace the last real report.
        if folder and not self._task.check_mode:
            names = [host + '.json']
            if report.get('status') == 'redeployed':
                names.append(host + '.last-redeploy.json')
            try:
                if not os.path.isdir(folder):
                    os.makedirs(folder, 0o755)
                text = json.dumps(report, indent=4, sort_keys=True, default=str) + '\n'
                for name in names:
                    path = os.path.join(folder, name)
                    write_atomic(path, text)
                    written.append(path)
            except (IOError, OSError) as exc:
                raise AnsibleActionFail('could not write the report of %s to %s: %s' % (host, folder, to_native(exc)))
        result.update(changed=False, written=written, report=report,
                      ansible_stats={'data': {STATS_KEY: {host: report}}, 'aggregate': True, 'per_host': False})
        return result

    def _build(self, stage, task_vars):
        found = rendered(self._templar, task_vars, list(RESULTS.values()) + list(SETTINGS),
                         dict((name, None) for name in RESULTS.values()))
        run = dict((key, found[name]) for key, name in RESULTS.items())
        decision, state = run.pop('decision') or {}, run['state'] or {}
        plan = run.pop('plan') or {}
        run.update(check_mode=bool(task_vars.get('ansible_check_mode')), manager=state.get('service_manager'),
                   reasons=decision.get('reasons', []), redeploy_needed=decision.get('redeploy_needed', False),
                   patch_state=decision.get('patch_state', {}))
        settings = {'host': found['inventory_hostname'], 'patch_file': found['sglang_patch_file'],
                    'router_url': found['sglang_router_url'], 'rollback_deadline': found['sglang_rollback_deadline'],
                    'rollback_idle': found['sglang_rollback_idle']}
        if stage == 'opened':
            opened_at = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return _report.window_open(run, settings, opened_at, plan['paths']['guard_dir'])
        return _report.report(run, settings)
