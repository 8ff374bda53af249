# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unified diffs applied to a package tree: parsing, path confinement, GNU patch argv, staging, lock, journal.

The contract is all-or-nothing. GNU patch runs only against copies in a
staging folder; site-packages changes only in ``PatchTransaction.commit``,
which writes every new file and a copy of every original beside its target,
records them in a journal, and only then renames the new files into place.
A run that finds a journal (the previous one crashed mid-commit) puts the
originals back and removes the temp files before anything else
(``Journal.recover``). Runs on one package are serialised by ``PackageLock``.

Diffs are handled as bytes, as GNU patch does: a diff in another encoding
applies byte for byte; only file names must be UTF-8.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable

# LockTimeout is what PackageLock raises: callers catch it from here.
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import (  # pylint: disable=unused-import
    FileLock,
    LockTimeout,
    fsync_dir,
    mode_and_owner,
    read_bytes,
    unlink_quietly,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import write_beside as write_file_beside
from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandResult


class DiffError(Exception):
    """The diff is empty, malformed, escapes the tree, or asks for what we do not support."""


# GNU patch reads git extensions too; renames, new or deleted files and binary
# hunks would let a diff touch paths we never confined, so they are refused.
_UNSUPPORTED_GIT_LINES = ('rename from ', 'rename to ', 'copy from ', 'copy to ', 'new file mode ',
                          'deleted file mode ', 'GIT binary patch', 'Binary files ')
# GNU patch applies git's mode lines only in some versions and modes; sglang_patch changes
# contents only, so a mode change is refused rather than dropped silently.
_MODE_LINES = ('old mode ', 'new mode ')
_HUNK_HEADER = re.compile(r'^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@')


def diff_text(data: bytes) -> str:
    """The diff bytes as text for parsing; bytes that are not UTF-8 survive as surrogates."""
    return data.decode('utf-8', 'surrogateescape')


def is_utf8(data: bytes) -> bool:
    try:
        data.decode('utf-8')
    except UnicodeDecodeError:
        return False
    return True


def restore_final_newline(data: bytes) -> bytes:
    """The diff with its final line ending, and the blank context lines a strip removed, put back.

    ``lookup('file', ...)`` strips trailing whitespace (rstrip=true by default):
    the final newline, and with it any trailing lines of the last hunk that were
    blank context lines. GNU patch then stops with "patch unexpectedly ends in
    middle of line" or a malformed hunk. The hunk header says how many lines
    the hunk has; lines missing from both sides can only have been blank context.
    """
    if not data:
        return data
    eol = b'\r\n' if b'\r\n' in data.split(b'\n', 1)[0] + b'\n' else b'\n'
    if not data.endswith(b'\n'):
        data += eol
    lines = data.split(b'\n')[:-1]
    start = None
    for number, line in enumerate(lines):
        if line.startswith(b'@@ '):
            start = number
    if start is None:
        return data
    match = _HUNK_HEADER.match(diff_text(lines[start]))
    if not match:
        return data
    old_len = int(match.group(1)) if match.group(1) is not None else 1
    new_len = int(match.group(2)) if match.group(2) is not None else 1
    old_seen = new_seen = 0
    for line in lines[start + 1:]:
        line = line.rstrip(b'\r')
        if line.startswith(b'-'):
            old_seen += 1
        elif line.startswith(b'+'):
            new_seen += 1
        elif line.startswith(b'\\'):
            continue
        else:
            old_seen += 1
            new_seen += 1
    missing = old_len - old_seen
    if missing > 0 and missing == new_len - new_seen:
        data += (b' ' + eol) * missing
    return data


def _header_name(line: str) -> str:
    name = line[4:].split('\t', 1)[0].rstrip('\r\n')
    if name.startswith('"'):
        raise DiffError('quoted file names are not supported: %r' % line.strip())
    try:
        name.encode('utf-8')
    except UnicodeEncodeError:
        raise DiffError('a file name in the diff is not UTF-8: %r' % name.encode('utf-8', 'surrogateescape'))
    return name.rstrip()


def _strip_components(name: str, strip: int) -> str:
    parts = name.split('/')
    if name.startswith('/'):
        raise DiffError('absolute path in diff: %r' % name)
    if len(parts) <= strip:
        raise DiffError('path %r has fewer than strip=%d+1 components' % (name, strip))
    stripped = parts[strip:]
    if any(part == '..' for part in stripped):
        raise DiffError('path escapes the target tree: %r' % name)
    cleaned = [part for part in stripped if part not in ('', '.')]
    if not cleaned:
        raise DiffError('empty path in diff: %r' % name)
    return '/'.join(cleaned)


def parse_targets(diff_text: str, strip: int) -> list[str]:
    """Relative paths the diff modifies, in order of appearance, each once.

    Raises DiffError for an empty diff, hunks without file headers, paths that
    are absolute or climb out with '..', and file creation, deletion or rename.
    """
    targets = []
    hunks = 0
    pending_old = None
    current = None
    for line in diff_text.splitlines():
        if line.startswith(_MODE_LINES):
            raise DiffError('the diff changes a file mode (%r); sglang_patch changes file contents only: '
                            'remove the "old mode"/"new mode" lines, or set the mode with ansible.builtin.file'
                            % line.strip())
        if line.startswith(_UNSUPPORTED_GIT_LINES):
            raise DiffError('unsupported diff feature (only modifications of existing text files): %r'
                            % line.strip())
        if line.startswith('--- '):
            pending_old = _header_name(line)
            continue
        if line.startswith('+++ ') and pending_old is not None:
            new = _header_name(line)
            if '/dev/null' in (pending_old, new):
                raise DiffError('the diff creates or deletes a file (%s -> %s); only existing files can be patched'
                                % (pending_old, new))
            old_rel = _strip_components(pending_old, strip)
            new_rel = _strip_components(new, strip)
            if old_rel != new_rel:
                raise DiffError('the diff renames %s to %s; renames are not supported' % (old_rel, new_rel))
            current = new_rel
            if current not in targets:
                targets.append(current)
            pending_old = None
            continue
        pending_old = None
        if line.startswith('@@ '):
            if current is None:
                raise DiffError('hunk before any ---/+++ file header: %r' % line.strip())
            hunks += 1
    if hunks == 0:
        raise DiffError('the diff contains no hunks (empty or not a unified diff); refusing it, '
                        'since GNU patch would "apply" it silently')
    return targets


def confine(tree: str, relative_paths: list[str]) -> list[str]:
    """Real paths for relative_paths, each an existing regular file really inside tree.

    A symlink inside the tree is followed: its real file is what gets patched,
    and the link stays a link. Two names for one real file are refused.
    """
    root = os.path.realpath(tree)
    absolute = []
    seen = {}
    for rel in relative_paths:
        path = os.path.join(root, rel)
        real = os.path.realpath(path)
        if not (real == root or real.startswith(root + os.sep)):
            raise DiffError('%s resolves to %s, outside %s' % (rel, real, root))
        if not os.path.isfile(real):
            raise DiffError('target file %s does not exist in %s' % (rel, root))
        if real in seen:
            raise DiffError('%s and %s are the same file (%s) through a link; patch it under one name'
                            % (seen[real], rel, real))
        seen[real] = rel
        absolute.append(real)
    return absolute


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode('utf-8', 'surrogateescape'))


def diff_bytes(content: str) -> bytes:
    """A diff given as module text, as the bytes patch reads (its final newline back; see restore_final_newline)."""
    return restore_final_newline(content.encode('utf-8', 'surrogateescape'))


class PatchCommand:
    """argv builder for GNU patch, strict enough to never guess or prompt."""

    def __init__(self, patch_path: str) -> None:
        self.path = patch_path

    def apply(self, directory: str, patch_file: str, strip: int, reverse: bool = False,
              dry_run: bool = False) -> list[str]:
        argv = [
            self.path,
            '--batch',            # never stop at "File to patch:"
            '--forward',          # an applied patch is an error, never silently reversed
            '--unified',          # the only format parse_targets confined
            '--fuzz=0',           # a hunk applies exactly or not at all
            '--strip=%d' % strip,
            '--directory=%s' % directory,
            '--input=%s' % patch_file,
            '--no-backup-if-mismatch',
            '--reject-file=-',
        ]
        if reverse:
            argv.append('--reverse')
        if dry_run:
            argv.append('--dry-run')
        return argv


def read_dist_version(site_packages: str, distribution: str = 'sglang') -> str | None:
    """Version from DIST-*.dist-info/METADATA without importing the package (sglang imports torch)."""
    pattern = os.path.join(site_packages, '%s-*.dist-info' % distribution)
    for info_dir in sorted(glob.glob(pattern)):
        metadata = os.path.join(info_dir, 'METADATA')
        try:
            with open(metadata, 'rb') as handle:
                for raw in handle:
                    line = raw.decode('utf-8', 'replace')
                    if line.startswith('Version:'):
                        return line.split(':', 1)[1].strip()
                    if not line.strip():
                        break
        except OSError:
            continue
    return None


# Prints the folder that holds the sglang package, found without importing it. Run with
# ``python -I`` from an empty folder: neither the current folder nor PYTHONPATH may put
# another "sglang" ahead of the interpreter's own site-packages.
SITE_MARKER = 'SGLANG_SITE_PACKAGES='
DISCOVER_SITE_PACKAGES = (
    "import importlib.util, os, sys\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "locs = list(spec.submodule_search_locations or []) if spec else []\n"
    "sys.exit(3) if not locs else print('" + SITE_MARKER + "' + os.path.dirname(os.path.realpath(locs[0])))\n"
)


def parse_site_packages(stdout: str) -> str | None:
    """The folder DISCOVER_SITE_PACKAGES printed, or None (a sitecustomize may print more lines)."""
    for line in stdout.splitlines():
        if line.startswith(SITE_MARKER) and line[len(SITE_MARKER):].strip():
            return line[len(SITE_MARKER):].strip()
    return None


def discover_site_packages(run: Callable, python: str, cwd: str) -> tuple[str | None, CommandResult]:
    """(the folder holding python's sglang or None, the command's result); run is a CommandRunner's run.

    cwd must be an empty folder (the module's tmpdir): with -I, neither it nor PYTHONPATH can put
    another "sglang" ahead of the interpreter's own site-packages.
    """
    found = run([python, '-I', '-c', DISCOVER_SITE_PACKAGES], cwd=cwd)
    if found.rc != 0 or getattr(found, 'timed_out', False):
        return None, found
    return parse_site_packages(found.stdout), found


TEMP_SUFFIX = '.sglang_patch.tmp'
ORIG_SUFFIX = '.sglang_patch.orig'
JOURNAL_NAME = '.sglang_patch.journal'
LOCK_HINT = ('another sglang_patch run is changing this package (or a process holding it open is stuck: '
             'see `fuser -v %s`)')


def write_beside(target: str, data: bytes, suffix: str, mode_from: str | None = None) -> str:
    """A new file in target's folder holding data, with target's mode and owner; returns its path."""
    mode, owner = mode_and_owner(mode_from or target)
    return write_file_beside(target, data, suffix, mode, owner)


def replace_file(path: str, data: bytes, suffix: str, mode: int) -> None:
    """Put data at path atomically with mode, owned as its folder is (when root)."""
    dummy, owner = mode_and_owner(os.path.dirname(path) or '.')
    write_atomic(path, data, mode, suffix, owner)


class PackageLock(FileLock):
    """An exclusive flock on the package folder, waited for at most ``timeout`` seconds.

    flock on the folder itself needs no lock file, and the kernel drops it when
    the holder dies, so a crashed run never leaves a stale lock behind.
    """

    def __init__(self, package_dir: str, timeout: float, clock: Callable = time.monotonic,
                 sleep: Callable = time.sleep) -> None:
        super().__init__(package_dir, timeout, LOCK_HINT % package_dir, clock, sleep)
        self.package_dir = package_dir


class Journal:
    """The record of a commit in progress, in the package folder: what an interrupted commit left behind.

    ``state`` is "committing" from before the first rename until the last one,
    then "committed" while the copies of the originals are removed. A commit
    found "committing" is undone (each original copy renamed back over its
    target), one found "committed" is finished (the copies removed): either way
    the tree is whole again and no temp file is left.
    """

    def __init__(self, package_dir: str) -> None:
        self.path = os.path.join(package_dir, JOURNAL_NAME)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write(self, state: str, entries: list[dict[str, str]]) -> None:
        replace_file(self.path, json.dumps({'state': state, 'pid': os.getpid(), 'entries': entries},
                                           sort_keys=True).encode('utf-8'), TEMP_SUFFIX, 0o600)
        fsync_dir(os.path.dirname(self.path))

    def read(self) -> tuple[str, list[dict[str, str]]]:
        try:
            with open(self.path, 'rb') as handle:
                record = json.loads(handle.read().decode('utf-8'))
            state, entries = record['state'], [dict(entry) for entry in record['entries']]
            if state not in ('committing', 'committed') or \
                    not all(set(entry) >= {'target', 'new', 'orig'} for entry in entries):
                raise ValueError('unexpected content')
            return state, entries
        except (ValueError, KeyError, TypeError) as exc:
            raise DiffError('the journal %s of an interrupted commit cannot be read (%s); compare the files it '
                            'names with a fresh sglang install, then remove it' % (self.path, exc))

    def remove(self) -> None:
        unlink_quietly(self.path)
        fsync_dir(os.path.dirname(self.path))

    def plan(self) -> tuple[str, dict[str, str]]:
        """(state, {target: file holding what the target must contain}) without changing anything."""
        if not self.exists():
            return None, {}
        state, entries = self.read()
        if state == 'committing':
            return state, {entry['target']: entry['orig'] for entry in entries
                           if os.path.exists(entry['orig'])}
        return state, {}

    def recover(self) -> list[Any]:
        """Undo or finish an interrupted commit; return what was done, one line each (empty if nothing)."""
        if not self.exists():
            return []
        state, entries = self.read()
        done = []
        for entry in entries:
            if state == 'committing' and os.path.exists(entry['orig']):
                os.rename(entry['orig'], entry['target'])
                done.append('restored %s from the copy an interrupted commit kept' % entry['target'])
            elif unlink_quietly(entry['orig']):
                done.append('removed %s left by a finished commit' % entry['orig'])
            if unlink_quietly(entry['new']):
                done.append('removed %s left by an interrupted commit' % entry['new'])
        self.remove()
        done.append('removed the journal %s (the interrupted commit was %s)'
                    % (self.path, 'undone' if state == 'committing' else 'finished'))
        return done


def stray_temp_files(real_targets: list[str]) -> list[Any]:
    """Temp files an earlier run of this module left beside the targets (written, never renamed)."""
    found = []
    for target in real_targets:
        directory, name = os.path.split(target)
        for suffix in (TEMP_SUFFIX, ORIG_SUFFIX):
            found.extend(glob.glob(os.path.join(glob.escape(directory), '.%s.*%s' % (glob.escape(name), suffix))))
    return sorted(set(found))


class PatchTransaction:
    """Copies of the target files in a staging folder, and an all-or-nothing, journaled commit back.

    ``real_targets`` maps each relative path to its real file (see confine);
    ``sources`` optionally maps a real file to another file holding its
    content (check mode while an interrupted commit awaits recovery).
    ``staging_parent`` can be anywhere (check mode uses the module's temp folder).
    """

    SUFFIX = TEMP_SUFFIX

    def __init__(self, tree: str, relative_paths: list[str], staging_parent: str, real_targets: list[str] | None = None,
                 sources: dict[str, Any] | None = None, journal: Journal | None = None) -> None:
        self.tree = os.path.realpath(tree)
        self.relative_paths = list(relative_paths)
        self.real = dict(zip(self.relative_paths, real_targets)) if real_targets else \
            {rel: os.path.realpath(os.path.join(self.tree, rel)) for rel in self.relative_paths}
        self.journal = journal
        self.staging = tempfile.mkdtemp(prefix='sglang_patch-', dir=staging_parent)
        self.originals = {}
        sources = sources or {}
        for rel in self.relative_paths:
            source = sources.get(self.real[rel], self.real[rel])
            staged = self.staged_path(rel)
            if not os.path.isdir(os.path.dirname(staged)):
                os.makedirs(os.path.dirname(staged))
            self.originals[rel] = read_bytes(source)
            with open(staged, 'wb') as handle:
                handle.write(self.originals[rel])
            shutil.copystat(source, staged)

    def staging_tree(self) -> str:
        return os.path.join(self.staging, 'tree')

    def staged_path(self, rel: str) -> str:
        return os.path.join(self.staging_tree(), rel)

    def target_path(self, rel: str) -> str:
        """The real file behind rel: a symlinked target is patched through its link, which stays a link."""
        return self.real[rel]

    def changed_files(self) -> list[str]:
        return [rel for rel in self.relative_paths
                if read_bytes(self.staged_path(rel)) != self.originals[rel]]

    def diff(self, rel: str) -> dict[str, str]:
        def text(data: bytes) -> str:
            return data.decode('utf-8', 'replace')
        return {
            'before_header': rel + ' (before)',
            'after_header': rel + ' (after)',
            'before': text(self.originals[rel]),
            'after': text(read_bytes(self.staged_path(rel))),
        }

    def commit(self, relative_paths: list[str]) -> list[str]:
        """Replace targets with the staged files; on any error put every original back and re-raise."""
        return self._replace({rel: read_bytes(self.staged_path(rel)) for rel in relative_paths},
                             self.originals, relative_paths)

    def restore(self, relative_paths: list[str]) -> list[str]:
        """Put the original bytes back, through the same journaled replacement."""
        staged = {rel: read_bytes(self.staged_path(rel)) for rel in relative_paths}
        return self._replace({rel: self.originals[rel] for rel in relative_paths}, staged, relative_paths)

    def _replace(self, new_contents: dict[str, bytes], old_contents: dict[str, bytes],
                 relative_paths: list[str]) -> list[str]:
        entries = []
        try:
            for rel in relative_paths:
                target = self.target_path(rel)
                entry = {'target': target, 'new': write_beside(target, new_contents[rel], TEMP_SUFFIX), 'orig': None}
                entries.append(entry)
                entry['orig'] = write_beside(target, old_contents[rel], ORIG_SUFFIX)
        except Exception:
            self._discard(entries)
            raise
        journal = self.journal or Journal(self.tree)
        try:
            journal.write('committing', entries)
        except Exception:
            self._discard(entries)
            raise
        replaced = []
        try:
            for entry in entries:
                os.rename(entry['new'], entry['target'])
                replaced.append(entry)
            journal.write('committed', entries)
        except Exception:
            for entry in replaced:
                os.rename(entry['orig'], entry['target'])
            self._discard(entries)
            journal.remove()
            raise
        self._discard(entries)
        journal.remove()
        return list(relative_paths)

    @staticmethod
    def _discard(entries: list[dict[str, str]]) -> None:
        for entry in entries:
            for key in ('new', 'orig'):
                if entry.get(key):
                    unlink_quietly(entry[key])

    def cleanup(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


STAMP_VERSION = 1


def write_stamp(path: str, patch_sha256: str, strip: int, python: str, site_packages: str, targets: list[str],
                real_targets: list[str]) -> None:
    """Record, right after a verified apply, which patch is in and what each patched file now holds.

    Not a marker: read_stamp trusts it only while every file still hashes as recorded, so a revert, a
    reinstall or a rollback that put other bytes back makes it worthless, and the caller dry-runs again.
    Written atomically (temp file and rename) so a reader never sees half a stamp.
    """
    stamp = {'version': STAMP_VERSION, 'patch_sha256': patch_sha256, 'strip': strip, 'python': python,
             'site_packages': site_packages,
             'files': [{'path': rel, 'real': real, 'sha256': sha256_bytes(read_bytes(real))}
                       for rel, real in zip(targets, real_targets)]}
    replace_file(path, json.dumps(stamp, sort_keys=True).encode('utf-8'), '.tmp', 0o644)


def remove_stamp(path: str) -> bool:
    return unlink_quietly(path)


def read_stamp(path: str, patch_sha256: str, python: str | None,
               strip: int = 1) -> tuple[dict[str, Any] | None, str | None]:
    """(stamp, None) when the stamp at path proves `patch_sha256` applied for `python`; else (None, why)."""
    try:
        with open(path) as handle:
            stamp = json.load(handle)
    except (OSError, ValueError) as exc:
        return None, 'no readable patch stamp (%s)' % exc
    if not isinstance(stamp, dict) or stamp.get('version') != STAMP_VERSION:
        return None, 'the patch stamp has another format'
    if stamp.get('patch_sha256') != patch_sha256:
        return None, 'the patch stamp records another patch'
    if stamp.get('python') != python or stamp.get('strip') != strip:
        return None, 'the patch stamp records another interpreter or strip'
    files = stamp.get('files')
    if not files or not isinstance(files, list):
        return None, 'the patch stamp lists no file'
    for entry in files:
        try:
            current = sha256_bytes(read_bytes(entry['real']))
        except (OSError, KeyError, TypeError):
            return None, 'a file the patch stamp lists is gone'
        if current != entry.get('sha256'):
            return None, '%s changed since the patch was applied' % entry['real']
    return stamp, None


ADAPTIVE_PARAMS = os.path.join('sglang', 'srt', 'speculative', 'adaptive_spec_params.py')


def adaptive_tiers_supported(site_packages: str) -> bool | None:
    """Whether the installed sglang reads --speculative-adaptive-config as batch-size tiers.

    Read from its own source, without importing it (sglang imports torch): releases with tiers (0.5.23)
    define _load_adaptive_config, which takes integer-string batch-size keys; 0.5.12.post1 has only
    load_adaptive_config, which reads one flat candidate_steps list and ignores such keys. None when
    the file cannot be read.
    """
    try:
        tree = ast.parse(read_bytes(os.path.join(site_packages, ADAPTIVE_PARAMS)))
    except OSError:
        return False if os.path.isdir(os.path.join(site_packages, 'sglang')) else None
    except (SyntaxError, ValueError):
        return None
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    return '_load_adaptive_config' in names
