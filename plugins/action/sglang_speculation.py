# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The speculation tuner's recommendation on the controller: each mode's benchmark made into one table, the
threshold and the adaptive tiers drawn from it (plugin_utils/_speculation.py, unit-tested there), written to
<report_dir>/<host>.speculation.json with the vars file that applies it (the host's name percent-encoded where it
holds more than letters, digits and '_.-~:', plugin_utils/_host_files.py)."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import write_atomic
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _speculation
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file

# The custom stats key the table is published under (the concise callback's TUNING_KEY).
STATS_KEY = 'sglang_speculation'
ARGUMENT_SPEC = dict(
    host=dict(type='str', required=True),
    modes=dict(type='list', elements='dict', required=True),
    measured=dict(type='dict', required=True),
    configured_steps=dict(type='int', required=True),
    configured_draft_tokens=dict(type='int', required=True),
    dynamic_mode=dict(type='str', default='env', choices=['env', 'adaptive']),
    report_dir=dict(type='path', required=True),
    settings=dict(type='dict', default={}),
    measured_at=dict(type='str', default=''),
)


def files_of(folder: str, host: str) -> tuple[str, str]:
    """(the table's path, the vars file's path) in folder."""
    return (os.path.join(folder, host_file(host, 'speculation')),
            os.path.join(folder, host_file(host, 'speculation_vars')))


def vars_text(host: str, applied: dict[str, int], measured_at: str) -> str:
    """The vars file: YAML, written as JSON (which YAML reads), with a comment that says where it comes from."""
    return ('# Written by playbooks/tune_speculation.yml for %s%s: the settings its measurements recommend.\n'
            '# Apply: ansible-playbook playbooks/redeploy.yml --limit %s -e @THIS_FILE -e sglang_perf_gate=true\n'
            '%s\n' % (host, ' at ' + measured_at if measured_at else '', host,
                      json.dumps(applied, indent=2, sort_keys=True)))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        mode_list = [{'name': str(mode['name']), 'steps': int(mode['steps'])} for mode in args['modes']]
        missing = [mode['name'] for mode in mode_list if not (args['measured'].get(mode['name']) or {}).get('levels')]
        if missing:
            raise AnsibleActionFail('no benchmark of the mode(s) %s: nothing to recommend from' % ', '.join(missing))
        levels = _speculation.table({mode['name']: args['measured'][mode['name']]['levels']
                                    for mode in mode_list})
        recommended = _speculation.recommend(levels, mode_list)
        if not recommended['compared']:
            raise AnsibleActionFail('no level was served in time and without errors by plain decoding or EAGLE-3: '
                                    'nothing to recommend from (%s)' % '; '.join(recommended['notes']))
        applied = _speculation.vars_for(recommended, args['configured_steps'], args['configured_draft_tokens'],
                                        args['dynamic_mode'])
        table_file, vars_file = files_of(args['report_dir'], args['host'])
        command = ('ansible-playbook playbooks/redeploy.yml --limit %s -e @%s -e sglang_perf_gate=true'
                   % (args['host'], vars_file))
        document = {'host': args['host'], 'measured_at': args['measured_at'] or None, 'settings': args['settings'],
                    'modes': mode_list, 'levels': levels, 'recommended': recommended,
                    'apply': {'vars': applied, 'vars_file': vars_file, 'command': command}}
        try:
            if not os.path.isdir(args['report_dir']):
                os.makedirs(args['report_dir'], 0o755)
            write_atomic(table_file, (json.dumps(document, indent=2, sort_keys=True) + '\n').encode('utf-8'),
                         mode=0o644, durable=False)
            write_atomic(vars_file, vars_text(args['host'], applied, args['measured_at']).encode('utf-8'),
                         mode=0o644, durable=False)
        except OSError as exc:
            raise AnsibleActionFail('could not write the tuning table of %s to %s: %s'
                                    % (args['host'], args['report_dir'], to_native(exc)))
        table = (_speculation.lines(levels, mode_list, recommended) + recommended['notes']
                 + ['written: %s' % table_file, 'apply: %s' % command])
        # The concise callback prints each tuned host's table before the recap (as the redeploy's summary).
        result.update(changed=False, levels=levels, recommended=recommended, vars=applied, file=table_file,
                      vars_file=vars_file, command=command, table=table,
                      ansible_stats={'data': {STATS_KEY: {args['host']: table}}, 'aggregate': True,
                                     'per_host': False})
        return result
