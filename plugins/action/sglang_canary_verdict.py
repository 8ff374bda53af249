# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The canary bake's verdict on the controller: the canary's live figures against the baseline's
(plugin_utils/_bake.py, unit-tested there), and what the verdict does: a failed bake, or an inconclusive one under
`inconclusive: rollback`, fails the task so that the window's rescue rolls the canary back; `hold` keeps the
canary and stops the rollout (the rollout gate reads the report's `bake`). The `bake` block is returned either way."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _bake

ACTIONS = ('rollback', 'hold', 'pass')


def decided(judged: dict[str, Any], inconclusive: str) -> str:
    """What the role does with the verdict: kept, rolled_back or held."""
    if judged['verdict'] == 'fail':
        return 'rolled_back'
    if judged['verdict'] == 'inconclusive':
        return {'rollback': 'rolled_back', 'hold': 'held', 'pass': 'kept'}[inconclusive]
    return 'kept'


def baseline_of(bake: dict[str, Any], before: dict[str, Any] | None) -> tuple[list[Any], str | None]:
    """(the baseline servers' figures, where they come from): the servers on the previous version read over the
    same window (`peers`); without one, the canary's old server read before the window (`before`); else none."""
    peers = [figures for figures in (bake.get('baselines') or {}).values() if figures]
    if peers:
        return peers, 'peers'
    if before and not before.get('failed') and before.get('canary'):
        return [before['canary']], 'before'
    return [], None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        validation, args = self.validate_argument_spec(argument_spec=dict(
            bake=dict(type='dict', required=True),
            min_requests=dict(type='int', default=_bake.DEFAULTS['min_requests']),
            latency_tolerance=dict(type='float', default=_bake.DEFAULTS['latency_tolerance']),
            error_tolerance=dict(type='float', default=_bake.DEFAULTS['error_tolerance']),
            alpha=dict(type='float', default=_bake.DEFAULTS['alpha']),
            inconclusive=dict(type='str', default='rollback', choices=list(ACTIONS)),
            before=dict(type='dict'),
        ))
        bake = args['bake']
        baselines, source = baseline_of(bake, args['before'])
        judged = _bake.verdict(bake.get('canary'), baselines, {key: args[key] for key in _bake.DEFAULTS})
        judged['baseline_source'] = source
        problems = bake.get('baseline_problems') or {}
        if problems:
            judged['reason'] += '; left out of the baseline: ' + '; '.join(
                '%s (%s)' % (host, why) for host, why in sorted(problems.items()))
        judged.update(seconds=bake.get('seconds'), action=decided(judged, args['inconclusive']))
        result.update(changed=False, bake=judged, verdict=judged['verdict'])
        if judged['action'] == 'rolled_back':
            result.update(failed=True, msg='the canary %s its bake: %s' % (
                'failed' if judged['verdict'] == 'fail' else 'was inconclusive in', judged['reason']))
        return result
