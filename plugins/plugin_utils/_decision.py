# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the server must be redeployed, from what sglang_server_info (and the patch's dry run) found."""

from __future__ import annotations

from typing import Any


def host_problems(state: dict[str, Any], python: str, host: str, adaptive: bool) -> str:
    """What the gathered state refuses before anything moves: a missing interpreter, a folder of the server's files
    that another user could write into, a server user that does not exist or cannot load the model, or adaptive mode
    on an sglang that would ignore batch-size tiers (0.5.12.post1: drafting would never stop at the threshold)."""
    if not state.get('python_exists'):
        return ('sglang_python %s does not exist on %s; point it at the interpreter whose site-packages holds'
                ' sglang.' % (python, host))
    untrusted = state.get('folders_untrusted') or []
    if untrusted:
        # The server's output is appended to its log as root, by the module's open or by systemd's
        # StandardOutput=append:, which follows a link: in such a folder another user links server.log to a file of
        # root's, and the next start writes into it. Refused before anything stops.
        return ('the server\'s files on %s would live in folders another user could write into: %s. Use folders that'
                ' root owns, with every folder above them root\'s and writable by neither group nor others (chmod'
                ' go-w, chown root), or set sglang_config_dir, sglang_run_dir and sglang_log_file to such folders.'
                % (host, '; '.join('%s, as %s' % (entry.get('folder'), entry.get('why')) for entry in untrusted)))
    access = access_problem(state.get('server_access') or {}, host)
    if access:
        return access
    if adaptive and state.get('adaptive_tiers') is not True:
        found = ('reads one flat list of candidate steps and would ignore them' if state.get('adaptive_tiers') is False
                 else 'could not be read')
        return ('sglang_dynamic_spec_mode adaptive needs an sglang whose --speculative-adaptive-config takes batch-size'
                ' tiers (0.5.23 does); the sglang of %s on %s %s. Use sglang_dynamic_spec_mode env with the patch, or'
                ' an sglang release with tiers.' % (python, host, found))
    return ''


def access_problem(access: dict[str, Any], host: str) -> str:
    """Why the server's user could not run or load the model (sglang_server_info's server_access, checked as that
    user: root's view proves nothing on an NFS export with root_squash); '' when it can."""
    problems = access.get('problems') or []
    missing = [entry for entry in problems if entry.get('path') is None]
    if missing:
        return ('the server cannot run as its user on %s: %s. Create it there (useradd --system), or set sglang_user'
                ' and sglang_group to a user and group that exist.' % (host, '; '.join(entry.get('why') for entry in missing)))
    if not problems:
        return ''
    return ('the server\'s user %s (group %s) cannot load what the server reads on %s, checked as that user: %s. Give'
            ' that user read access to each folder, its files and every folder above it (chmod, chgrp or an ACL; on NFS'
            ' with root_squash, on the file server), or set sglang_user and sglang_group to a user that has it.'
            % (access.get('user'), access.get('group'), host,
               '; '.join('%s %s %s' % (entry.get('label'), entry.get('path'), entry.get('why')) for entry in problems)))


def patch_state(state: dict[str, Any], patch_check: dict[str, Any], patch_file: str) -> dict[str, Any]:
    """The patch as the window and the report see it: from the stamp, or from the dry run."""
    stamp = state.get('patch') or {}
    if stamp.get('proven'):
        return dict(stamp, changed=False, applied=True)
    return dict(patch_check or {}) if patch_file else {}


def readmission_owed(state: dict[str, Any], router_url: str) -> dict[str, Any] | None:
    """The guard's record of a restore that left this server out of router_url (sglang_server_info's
    guard_router_owed), or None: none is owed, or it was owed by another router than the one configured now."""
    owed = state.get('guard_router_owed') or None
    if not owed or not router_url or (owed.get('router_url') or '').rstrip('/') != router_url.rstrip('/'):
        return None
    return owed


def reasons(state: dict[str, Any], patch_check: dict[str, Any], force_restart: bool,
            owed: dict[str, Any] | None = None) -> list[Any]:
    """Why the server is redeployed, in the report's words; [] when nothing must change."""
    found = ['force_restart'] if force_restart else []
    if owed:
        # Not listed by the router because a restore could not put it back, not because an operator drained it:
        # the window verifies it and puts it back (a server out of the router serves no client: its restart costs
        # none of them a request).
        found.append('left out of the router by the restore of run %s' % owed.get('run_id'))
    if (patch_check or {}).get('changed'):
        found.append('patch not applied')
    found.extend('%s changed' % label for label in state.get('configs_changed', []))
    if not state.get('running'):
        found.append('server not running')
    elif not state.get('healthy'):
        found.append('server not healthy')
    if state.get('mismatches'):
        found.append('running server differs: ' + ', '.join(state['mismatches']))
    if state.get('code_changed_since_start'):
        # A neighbour's patch of the environment both run from (docs/colocated.md): the code on disk is not the code
        # this server loaded, and its next start would load it unverified.
        found.append('sglang changed on disk after the server started')
    return found


def patch_due(patch_file: str, patch: dict[str, Any]) -> bool:
    """Whether the window applies the patch: the stamp or the dry run did not find it applied already."""
    return bool(patch_file) and bool(patch.get('changed', True))


def guard_files(pairs: list[dict[str, str]], patch: dict[str, Any]) -> list[str]:
    """What the guard saves before the stop: every live configuration file and every file the patch touches."""
    site_packages = patch.get('site_packages') or ''
    return [pair['live'] for pair in pairs] + ['%s/%s' % (site_packages, name) for name in patch.get('files') or []]


def undo(decided: dict[str, Any], plan: dict[str, Any] | None, pairs: list[dict[str, str]]) -> dict[str, Any]:
    """An undo run's decision (playbooks/undo.yml), over the redeploy's: the server is redeployed to put revision
    plan['target'] back (sglang_revisions state=planned's `undo`), whatever the inventory says; the patch is not due
    and no candidate is written or moved into place (the restored files are the truth, not the inventory's); the
    guard keeps the usual files and every file the undo writes. `daemon_reload` where the undo puts the systemd unit
    back. Without a plan (a redeploy), the decision as it was, with undo null."""
    if plan is None:
        return dict(decided, undo=None)
    restored = [entry['path'] for entry in plan.get('files') or []]
    units = [pair['live'] for pair in pairs if pair['label'] == 'systemd unit']
    guard = list(decided['guard_files'])
    guard += [path for path in plan.get('guard_files') or [] if path not in guard]
    return dict(decided, reasons=['undo to revision %s' % plan['target']], redeploy_needed=True, patch_due=False,
                changed_configs=[], writes=[], guard_files=guard,
                undo={'target': plan['target'], 'run_id': plan.get('run_id'), 'latest': plan.get('latest'), 'files': restored,
                      'daemon_reload': any(path in restored for path in units)})
