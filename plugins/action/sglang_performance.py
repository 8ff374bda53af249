# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The performance gate's verdict on the controller: the new server's benchmark against the baseline
(plugin_utils/_performance.py, unit-tested there), failed when the new server serves slower, so that the
window's rescue rolls back; the `performance` block is returned either way, for the report."""

from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import read_json
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _performance, _report


def stored(folder: str, host: str) -> dict[str, Any] | None:
    """The baseline kept in the host's last redeploy report (None without one, or without figures)."""
    path = os.path.join(os.path.expanduser(folder), _report.last_redeploy_file(host))
    try:
        return _performance.stored_baseline(read_json(path))
    except (OSError, ValueError):
        return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        validation, args = self.validate_argument_spec(argument_spec=dict(
            levels=dict(type='list', elements='int', required=True),
            after=dict(type='dict', required=True),
            before=dict(type='dict'),
            baseline=dict(type='str', default='measure', choices=list(_performance.BASELINES)),
            report_dir=dict(type='str', default=''),
            host=dict(type='str', default=''),
            throughput_tolerance=dict(type='float', required=True),
            itl_tolerance=dict(type='float', required=True),
        ))
        before, missing = self._baseline(args)
        judged = _performance.verdict(args['levels'], before, args['after'], args['throughput_tolerance'],
                                      args['itl_tolerance'], baseline=args['baseline'], missing=missing)
        result.update(changed=False, performance=judged, verdict=judged['verdict'])
        if judged['verdict'] == 'fail':
            result.update(failed=True, msg='the new server serves slower than the old one: ' + judged['reason'])
        return result

    @staticmethod
    def _baseline(args: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """(the baseline benchmark or None, what a level without one says)."""
        if args['baseline'] == 'stored':
            found = stored(args['report_dir'], args['host']) if args['report_dir'] else None
            return found, 'no stored figures in the last redeploy report of %s' % args['host']
        before = args['before'] or {}
        if before.get('failed'):
            return None, 'the old server could not be measured (%s)' % before.get('msg', 'no reason given')
        if not before.get('measured'):
            return None, 'the old server was not measured (it did not serve before the stop)'
        return before, 'no baseline'
