# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's redeploy report, from what the run registered.

`run` maps the step table's run keys (plugin_utils/_steps.py) to the role's registered results and notes (None:
the step never ran), as run_of() completes them with patch_state, reasons, redeploy_needed, manager and
check_mode. `settings` holds host, patch_file, router_url,
rollback_deadline, perf_gate, the plan's server_info and environment (what the server must report) and
dynamic_spec_env_read_by. Every
report has the same keys, whatever happened; the dashboard and the tests read the messages, so they stay word for
word.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _performance
from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_text
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file
from ansible_collections.gpuops.sglang.plugins.plugin_utils._rollout import FAILED
from ansible_collections.gpuops.sglang.plugins.plugin_utils._steps import REPORTED_PHASES, run_keys

SLOT_KEYS = ('slot', 'waited_s', 'held_by', 'unavailable')
SPLIT = 'split'
# The report's names for the run's step results and notes (`run`; a step that never ran gives none): the step table's.
RESULTS = run_keys()


def report_files(host: str, status: str | None) -> list[str]:
    """The report's file names: HOST.json, and HOST.last-redeploy.json after a redeploy (what the performance
    gate's stored baseline reads)."""
    names = [host_file(host, 'report')]
    if status == 'redeployed':
        names.append(last_redeploy_file(host))
    return names


def last_redeploy_file(host: str) -> str:
    """The report of the host's last redeploy, kept until the next one (the performance gate's stored baseline)."""
    return host_file(host, 'last_redeploy')


def run_of(results: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    """The run as report() reads it, from the step results by their names in RESULTS (`group`: the plan's): a node of
    a server group was decided with its group, whose reasons name the node they come from."""
    run = {key: results.get(key) for key in RESULTS}
    decision, state = run.pop('decision') or {}, run['state'] or {}
    group_decision = run.pop('group_decision') or {}
    if 'reasons' in group_decision:
        decision = dict(decision, reasons=group_decision['reasons'],
                        redeploy_needed=group_decision.get('redeploy_needed', False))
    run.update(check_mode=check_mode, manager=state.get('service_manager'),
               reasons=decision.get('reasons', []), redeploy_needed=decision.get('redeploy_needed', False),
               patch_state=decision.get('patch_state', {}))
    return run


def kill_lines(killed: list[dict[str, Any]] | None) -> list[str]:
    """One line per process a kill step ended: its command line and the last signal it got."""
    return ['%s <- SIG%s' % (entry.get('cmdline', '?'), entry.get('signal', '?')) for entry in killed or []]


def spared_lines(spared: list[dict[str, Any]] | None) -> list[str]:
    """One line per GPU holder a scoped release left alone (another server's, a foreign job): why it was spared."""
    return ['%s (%s)' % (entry.get('cmdline', '?'), entry.get('why', '?')) for entry in spared or []]


def _get(run: dict[str, Any], name: str) -> dict[str, Any]:
    return run.get(name) or {}


def _span(end: float | str, start: float | str) -> float:
    return round(float(end) - float(start), 2)


def _changed_ok(result: dict[str, Any] | None) -> bool:
    """Ansible's `is succeeded and is changed` of a registered result; False for a step that never ran."""
    return result is not None and not result.get('failed', False) and bool(result.get('changed', False))


def rolled(run: dict[str, Any]) -> dict[str, Any] | None:
    """What the guard did for this run's rollback (the deadline may have fired it before the rescue asked)."""
    rollback = _get(run, 'rollback')
    if rollback.get('fired') is not None:
        return rollback['fired']
    last = rollback.get('last_fired') or {}
    if last.get('run_id', '') == (run.get('run_id') or '-'):
        return rollback.get('last_fired')
    return None


def stop_phase(run: dict[str, Any]) -> float | None:
    """From SIGTERM until the step after the stop saw the server gone (the stop itself does not wait); null
    when no step saw that (a failure before, or a server that survived), never the 0.02 s the stop took to
    send SIGTERM."""
    stop = _get(run, 'stop')
    seen = [(_get(run, name).get('awaited') or {}).get('gone_at') for name in ('kill', 'gpu_release')]
    gone_at = next((moment for moment in seen if moment), None)
    if gone_at is not None and stop.get('stopped_at') is not None:
        return _span(gone_at, stop['stopped_at'])
    return None if stop.get('stopping') else stop.get('stop_elapsed')


def phases(run: dict[str, Any]) -> dict[str, float | None]:
    """Seconds of each step the host measures itself (the step table's reported ones), by its phase."""
    start = _get(run, 'start')
    measured = {
        'stop': stop_phase(run),
        'kill': _get(run, 'kill').get('elapsed'),
        'gpu_release': _get(run, 'gpu_release').get('elapsed'),
        'start': _span(start['healthy_at'], start['started_at']) if start.get('healthy_at') is not None else None,
    }
    return {phase: measured[phase] for phase in REPORTED_PHASES}


def patch_outcome(run: dict[str, Any], patch_file: str | None) -> str:
    patch = _get(run, 'patch_state')
    if not patch_file:
        return 'none'
    applied_now = _get(run, 'patch')
    if applied_now.get('changed') and run.get('failure') is None:
        return 'applied now'
    if patch.get('applied', False) and not patch.get('changed', True):
        return 'already applied'
    # Due at the decision, found applied in the window: another server of the run, sharing this sglang, applied it
    # in its own window first (issue 44); the server restarted on the patched code all the same.
    if applied_now.get('applied') and not applied_now.get('changed') and run.get('failure') is None:
        return 'already applied'
    return 'not applied'


def router_block(run: dict[str, Any], router_url: str | None) -> dict[str, Any]:
    before, removed, readmitted = _get(run, 'router_before'), run.get('router_out'), run.get('router_in')
    restore = rolled(run)
    if restore is not None and restore.get('router_readmitted') is not None:
        member = restore['router_readmitted']
    elif 'member' in (readmitted or {}):
        member = readmitted['member']
    elif 'member' in (removed or {}):
        member = removed['member']
    else:
        member = before.get('member_before')
    return {
        'url': router_url or None,
        'member_before': before.get('member_before'),
        'removed': _changed_ok(removed),
        'drain': _get(run, 'stop').get('drain'),
        # After a rollback only the guard's word counts: it takes the server out again before restoring.
        'readmitted': bool(restore.get('router_readmitted')) if restore is not None else _changed_ok(readmitted),
        # The last thing learnt about the membership: the guard's restore, the run's readmit, its removal, the query.
        'member': member,
    }


def performance(run: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The gate's verdict (sglang_performance's block), or why this run has none: same keys every run."""
    judged = _get(run, 'performance').get('performance')
    if judged is not None:
        return judged
    if run.get('skip_reason'):
        why = 'the host was left alone'
    elif run.get('check_mode'):
        why = 'check mode: nothing was measured'
    elif not run.get('redeploy_needed'):
        why = 'nothing was redeployed'
    else:
        why = 'the run stopped before the new server was measured'
    return _performance.unjudged(as_bool(settings.get('perf_gate')), why)


def base(run: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The keys every report has; outcome() fills in status, healthy, reason, downtime_s (and rollback)."""
    released, patch = _get(run, 'gpu_release'), _get(run, 'patch_state')
    gpus_before = released.get('gpus_before', _get(run, 'gpu_probe').get('gpus_before', []))
    whole = {
        'host': settings['host'], 'run_id': run.get('run_id'), 'check_mode': bool(run.get('check_mode')),
        'status': 'failed', 'healthy': False, 'reason': '', 'reasons': run.get('reasons') or [],
        'service_manager': run.get('manager'), 'phases_s': phases(run), 'downtime_s': None,
        'killed_in_container': kill_lines(_get(run, 'kill').get('killed')),
        'killed_gpu_holders': kill_lines(released.get('killed')),
        'spared_gpu_holders': spared_lines(released.get('spared')),
        'gpu_memory_before_mib': [gpu['memory_used_mib'] for gpu in gpus_before or []],
        'gpu_memory_released_mib': [gpu['memory_used_mib'] for gpu in released.get('gpus') or []],
        'patch': patch_outcome(run, settings['patch_file']),
        'patch_sha256': patch.get('patch_sha256', ''), 'sglang_version': patch.get('sglang_version', ''),
        'rollback': None, 'router': router_block(run, settings['router_url']),
        'fleet_slot': {key: value for key, value in _get(run, 'slot').items() if key in SLOT_KEYS},
        'takeover': _get(run, 'takeover').get('fired'), 'performance': performance(run, settings),
        # The canary bake's verdict (sglang_canary_verdict's `bake`); null where no bake ran.
        'bake': _get(run, 'bake').get('bake'),
        'prefetch': prefetch_block(run),
        'group': group_block(run.get('group')),
        'verified_settings': None,
        # An undo run's (playbooks/undo.yml): the revision put back, the latest before it, the files written.
        'undo': undo_block(run),
        # Who reads the dynamic speculation variable in env mode (patch, installed); null when env mode is off.
        'dynamic_spec_env_read_by': settings.get('dynamic_spec_env_read_by') or None,
    }
    whole.update(dry_run_block(run))
    return whole


# What the report keeps of sglang_prefetch's result: the figures, not the file list.
PREFETCH_KEYS = ('bytes', 'read_bytes', 'would_read_bytes', 'resident_before_pct', 'resident_after_pct', 'seconds',
                 'stopped_early', 'why', 'reserve_mib', 'mem_available_mib_before', 'mem_available_mib_after',
                 'cache_files')


def prefetch_block(run: dict) -> dict | None:
    """What the prefetch read into the page cache before the window (in check mode, what it would read): its
    figures, the number of files and the paths it skipped with why, the compile caches' files found and folders
    made; null where it did not run (nothing to redeploy, a refusal before it). With the prefetch off it reads
    nothing (files 0) and still checks the cache folders."""
    prefetch = _get(run, 'prefetch')
    if 'files' not in prefetch:
        return None
    block = {key: prefetch.get(key) for key in PREFETCH_KEYS}
    block.update(files=len(prefetch['files']), skipped=prefetch.get('skipped_paths') or [],
                 cache_folders_made=[entry['path'] for entry in prefetch.get('cache_folders') or [] if entry['made']])
    return block


def undo_block(run: dict[str, Any]) -> dict[str, Any] | None:
    """{target, latest, files}: what the undo step (sglang_revisions state=restored) put back, the paths of the
    files written or removed; null where no revision was put back (a redeploy, an undo that stopped before it)."""
    undo = _get(run, 'restore').get('undo')
    if not undo:
        return None
    return {'target': undo.get('target'), 'latest': undo.get('latest'),
            'files': [entry['path'] for entry in undo.get('files') or []]}


def dry_run_block(run: dict[str, Any]) -> dict[str, Any]:
    """What a check run's dry run found: would_kill ({stop, kill, gpu_release}: [{pid, user, cmdline,
    gpus}]), flag_changes ([{flag, live, wanted}]) and deadline ({deadline_s, idle_s}, the guard's); each null where
    no dry run ran (a real run, or a check run that would change nothing)."""
    dry_run = run.get('dry_run') or {}
    return {key: dry_run.get(key) for key in ('would_kill', 'flag_changes', 'deadline')}


def group_block(group: dict[str, Any] | None) -> dict[str, Any] | None:
    """A node's group as its report names it (null for a single-node server); the group's outcome is known
    only once every node has its report (group_outcome), null until then."""
    if not group:
        return None
    return {'name': group['name'], 'nnodes': group['nnodes'], 'rank': group['rank'], 'outcome': None,
            'failed_nodes': None}


def group_outcome(node_reports: list[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """{outcome, failed_nodes} of a group from its nodes' reports ([(node, report or None)] in rank order):
    the status the nodes share, or "split" when they ended differently; a node without a report (the run lost
    it) counts as failed, as its server is not known to serve."""
    statuses = [(report or {}).get('status', 'failed') for dummy, report in node_reports]
    failed = [node for (node, dummy), status in zip(node_reports, statuses) if status in FAILED]
    return {'outcome': statuses[0] if len(set(statuses)) == 1 else SPLIT, 'failed_nodes': failed}


def with_group_outcome(own: dict[str, Any], node_reports: list[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """This node's report with its group's outcome filled in (a single-node server's report as it is)."""
    if own.get('group') is None:
        return own
    whole = dict(own, group=dict(own['group']))
    whole['group'].update(group_outcome(node_reports))
    return whole


def _drain_note(run: dict[str, Any]) -> str:
    drain = _get(run, 'stop').get('drain')
    if drain is not None and not drain.get('idle'):
        return '; stopped with requests possibly in flight: ' + as_text(drain.get('why'))
    return ''


def _router_note(run: dict[str, Any], restore: dict[str, Any] | None) -> str:
    if not _get(run, 'router_before').get('member_before') or restore is None:
        return ''
    if restore.get('router_readmitted'):
        return '; back in the router'
    return '; NOT back in the router (%s)' % (restore.get('router_problem') or 'the guard did not say why')


def _finished(run: dict[str, Any]) -> dict[str, Any]:
    """No failure: unchanged, redeployed, or (check mode) what would be redeployed."""
    needed, reasons = bool(run.get('redeploy_needed')), '; '.join(run.get('reasons') or [])
    stop, started = _get(run, 'stop'), _get(run, 'start')
    if run.get('check_mode') and needed:
        reason = 'would redeploy (check mode): ' + reasons
    else:
        reason = reasons + _drain_note(run) if needed else 'nothing to change'
    downtime = 0
    if stop.get('stopped_at') is not None and started.get('healthy_at') is not None:
        downtime = _span(started['healthy_at'], stop['stopped_at'])
    undone = undo_block(run)
    if undone and needed and not run.get('check_mode'):
        reason = 'undone to revision %s: %d file(s) put back%s' % (
            undone['target'], len(undone['files']), _drain_note(run))
    status = 'unchanged' if not needed or run.get('check_mode') else 'undone' if undone else 'redeployed'
    return {'status': status,
            'healthy': started.get('healthy', False) if run.get('window_opened') else _get(run, 'state').get('healthy'),
            'reason': reason, 'downtime_s': downtime}


def _rolled_back(run: dict[str, Any]) -> dict[str, Any]:
    restore = rolled(run)
    guard = restore or {}
    healthy = bool(guard.get('healthy', False))
    serves = ('the previous server serves again' if healthy else 'the previous server does not serve: '
              + '; '.join(guard.get('problems', ['no guard was armed'])))
    reason = '%s; rolled back: %d file(s) restored, %s%s' % (
        run['failure'], len(guard.get('restored_files', [])), serves, _router_note(run, restore))
    return {'status': 'rolled_back' if healthy else 'failed', 'healthy': healthy, 'reason': reason,
            'downtime_s': guard.get('downtime_s'), 'rollback': restore}


def outcome(run: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """status, healthy, reason and downtime_s: skipped, finished, failed before the window, or rolled back."""
    if run.get('skip_reason'):
        return {'status': 'skipped', 'healthy': None, 'reason': run['skip_reason'], 'downtime_s': 0}
    if run.get('failure') is None:
        return _finished(run)
    if not run.get('window_opened'):
        return {'status': 'failed', 'healthy': _get(run, 'after_failure').get('healthy', False),
                'reason': 'nothing was stopped: ' + run['failure'], 'downtime_s': 0}
    if _get(run, 'rollback').get('unreachable'):
        return {'status': 'failed', 'healthy': False, 'downtime_s': None,
                'reason': '%s; the host could not be reached to roll back: its guard restores the previous server'
                          ' %s' % (run['failure'], _guard_acts(settings))}
    return _rolled_back(run)


def _guard_acts(settings: dict[str, Any]) -> str:
    """When the guard acts after the run is gone, in the report's words."""
    if settings.get('rollback_idle'):
        return ('%s s after its last renewal (sglang_rollback_idle), at the latest %s s after the window opened'
                % (as_text(settings['rollback_idle']), as_text(settings['rollback_deadline'])))
    return '%s s after the window opened' % as_text(settings['rollback_deadline'])


def verified_settings(run: dict[str, Any], settings: dict[str, Any], ended: dict[str, Any]) -> dict[str, Any] | None:
    """{server_info, environment}: what the run saw the server report on the host, or None where it saw nothing.

    `settings` server_info and environment are the plan's expected values; a healthy server on which this run
    found nothing to change (its read compared them) or which it redeployed (the start fails on a mismatch)
    reported exactly those. The dashboard shows them for a server it may not ask with its key. A rank > 0 of a
    server group serves no HTTP: its settings are verified on rank 0.
    """
    expected = {'server_info': dict(settings.get('server_info') or {}),
                'environment': dict(settings.get('environment') or {})}
    if ended['status'] not in ('unchanged', 'redeployed') or ended['healthy'] is not True \
            or (run.get('check_mode') and run.get('redeploy_needed')) or not any(expected.values()):
        return None
    if (run.get('group') or {}).get('rank') not in (None, 0):
        return None
    return expected


def report(run: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The whole report: base() with outcome() over it."""
    whole = base(run, settings)
    whole.update(outcome(run, settings))
    whole['verified_settings'] = verified_settings(run, settings, whole)
    return whole


def window_open(run: dict[str, Any], settings: dict[str, Any], opened_at: str, guard_dir: str) -> dict[str, Any]:
    """What the report says while the window is open: a run cut off in it leaves this, not a stale success."""
    whole = base(run, settings)
    whole.update(status='failed', healthy=False, reason=(
        'the run stopped inside the outage window; unless it confirmed the new server, the guard on the host restores'
        ' the previous server %s (%s) and writes its report to %s/fired.json'
        % (_guard_acts(settings), opened_at, guard_dir)))
    return whole


def failure_note(task: dict[str, Any] | None, result: dict[str, Any] | None, limit: int = 600) -> str:
    """`STEP: MESSAGE` for a rescue: the failed task's name and its msg on one line, the message cut to `limit`.

    Whitespace runs become one space and the cut is Jinja's truncate(limit) (5 characters of leeway, then at a
    word, with '...'): what the role's rescues wrote in Jinja before.
    """
    name = (task or {}).get('name') or 'a step'
    message = re.sub(r'\s+', ' ', str((result or {}).get('msg') or 'failed'))
    if len(message) > limit + 5:
        message = message[:limit - 3].rsplit(' ', 1)[0] + '...'
    return '%s: %s' % (name, message)
