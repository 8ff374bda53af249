# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a check run found the window would do: the processes it would end, the launch flags it would change.

Pure functions over what the dry run's read-only steps registered (roles/sglang/tasks/dry_run.yml): the stop's
RV(would_stop), the container kill's and the GPU release's RV(targets) in check mode, and the live launch
configuration against the plan's arguments.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils._groups import flag_pairs

# The window's steps that end processes, in the order the window runs them, by the report's names for them.
KILL_STEPS = ('stop', 'kill', 'gpu_release')


def launch_flags(args: list) -> dict:
    """{flag: value} of an SGLang argv: `--flag VALUE` and `--flag=VALUE` as their value, a bare switch as true.
    A flag given twice keeps its last value, as argparse does; anything before the first flag is left out."""
    return {flag: value for flag, value in flag_pairs([str(arg) for arg in args or []]) if flag.startswith('--')}


def live_args(launch_text: str | None) -> list | None:
    """The argv of a live launch configuration (launch.json), or None where there is none or it is not one."""
    try:
        spec = json.loads(launch_text) if launch_text else None
    except ValueError:
        return None
    args = spec.get('args') if isinstance(spec, dict) else None
    return args if isinstance(args, list) else None


def flag_changes(live: list | None, wanted: list) -> list:
    """[{flag, live, wanted}] for each launch flag the window would change, in the wanted argv's order then the
    flags it would drop; live (or wanted) null for a flag that is not there. With no live configuration (None),
    every wanted flag is a change."""
    before, after = launch_flags(live or []), launch_flags(wanted)
    names = list(after) + [name for name in before if name not in after]
    return [{'flag': name, 'live': before.get(name), 'wanted': after.get(name)}
            for name in names if before.get(name) != after.get(name)]


def would_kill(stop: dict | None, container: dict | None, release: dict | None) -> dict:
    """{step: [{pid, user, cmdline, gpus}]} for each step of KILL_STEPS from its check-mode result (an empty list
    for a step that did not run: no container, say).

    The stop's processes are left out of the later steps' lists: in the window those steps wait for them to end
    (await_exit) before they look, and the container kill runs only for what else matches. The three run in the
    same PID namespace (the host's, or the container's where the host is one)."""
    stopped = list((stop or {}).get('would_stop') or [])
    own = {entry.get('pid') for entry in stopped}

    def besides(result: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [entry for entry in (result or {}).get('targets') or [] if entry.get('pid') not in own]
    return {'stop': stopped, 'kill': besides(container), 'gpu_release': besides(release)}


def _shown(value: bool | str | None) -> str:
    return '(none)' if value is None else json.dumps(value) if not isinstance(value, str) else value


def lines(found: dict, changes: list, deadline: dict) -> list:
    """The dry run in the operator's words, one line each: what each step would end, each flag change, the
    guard's bounds."""
    said = []
    for step in KILL_STEPS:
        for entry in found.get(step) or []:
            gpus = entry.get('gpus') or []
            said.append('would end (%s): PID %s, user %s: %s%s' % (
                step, entry.get('pid'), entry.get('user') or '?', entry.get('cmdline'),
                ' [GPU %s]' % ', '.join(str(gpu) for gpu in gpus) if gpus else ''))
        if not found.get(step):
            said.append('would end (%s): nothing' % step)
    for change in changes:
        said.append('flag %s: %s -> %s' % (change['flag'], _shown(change['live']), _shown(change['wanted'])))
    if not changes:
        said.append('no launch flag would change')
    said.append('guard: rolls back %s s after the window opens at the latest, or %s s after its last renewal'
                % (deadline.get('deadline_s'), deadline.get('idle_s')))
    return said


def dry_run(stop: dict | None, container: dict | None, release: dict | None, live_launch: str | None,
            wanted_args: list, deadline: dict) -> dict:
    """{would_kill, flag_changes, deadline, lines}: what the report and the printed plan say of a check run."""
    found = would_kill(stop, container, release)
    changes = flag_changes(live_args(live_launch), wanted_args)
    return {'would_kill': found, 'flag_changes': changes, 'deadline': dict(deadline),
            'lines': lines(found, changes, deadline)}
