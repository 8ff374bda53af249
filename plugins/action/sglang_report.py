# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writes a host's redeploy report on the controller and into the run's artifacts, in-process.

An action plugin rather than `copy` delegated to localhost: the report is written twice a run per
host (as the window opens, and at the end), and a module round trip to localhost cost about a second
each time, on the no-op path too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

STATS_KEY = 'sglang_redeploy'


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
            report=dict(type='dict', required=True),
            report_dir=dict(type='str', default=''),
            host=dict(type='str', required=True),
        ))
        report, folder, host = args['report'], args['report_dir'], args['host']
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
        result.update(changed=False, written=written,
                      ansible_stats={'data': {STATS_KEY: {host: report}}, 'aggregate': True, 'per_host': False})
        return result
