# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the server must be redeployed, from what sglang_server_info (and the patch's dry run) found."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def host_problems(state, python, host, adaptive):
    """What the gathered state refuses before anything moves: a missing interpreter, a folder of the server's files
    that another user could write into, or adaptive mode on an sglang that would ignore batch-size tiers
    (0.5.12.post1: drafting would never stop at the threshold)."""
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
    if adaptive and state.get('adaptive_tiers') is not True:
        found = ('reads one flat list of candidate steps and would ignore them' if state.get('adaptive_tiers') is False
                 else 'could not be read')
        return ('sglang_dynamic_spec_mode adaptive needs an sglang whose --speculative-adaptive-config takes batch-size'
                ' tiers (0.5.23 does); the sglang of %s on %s %s. Use sglang_dynamic_spec_mode env with the patch, or'
                ' an sglang release with tiers.' % (python, host, found))
    return ''


def patch_state(state, patch_check, patch_file):
    """The patch as the window and the report see it: from the stamp, or from the dry run."""
    stamp = state.get('patch') or {}
    if stamp.get('proven'):
        return dict(stamp, changed=False, applied=True)
    return dict(patch_check or {}) if patch_file else {}


def reasons(state, patch_check, force_restart):
    """Why the server is redeployed, in the report's words; [] when nothing must change."""
    found = ['force_restart'] if force_restart else []
    if (patch_check or {}).get('changed'):
        found.append('patch not applied')
    found.extend('%s changed' % label for label in state.get('configs_changed', []))
    if not state.get('running'):
        found.append('server not running')
    elif not state.get('healthy'):
        found.append('server not healthy')
    if state.get('mismatches'):
        found.append('running server differs: ' + ', '.join(state['mismatches']))
    return found


def patch_due(patch_file, patch):
    """Whether the window applies the patch: the stamp or the dry run did not find it applied already."""
    return bool(patch_file) and bool(patch.get('changed', True))


def guard_files(pairs, patch):
    """What the guard saves before the stop: every live configuration file and every file the patch touches."""
    site_packages = patch.get('site_packages') or ''
    return [pair['live'] for pair in pairs] + ['%s/%s' % (site_packages, name) for name in patch.get('files') or []]
