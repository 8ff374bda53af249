# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server's revision history on its host: what each confirmed redeploy changed, before and after (issue 46).

Layout, in the server's guard folder (the role's sglang_guard_dir/SERVICE; docs/undo.md, "Revisions"):
  revisions/N/revision.json   the index: number, origin, time, run id, sglang version, patch SHA-256, the report's
                              summary, and per file {path, change, stored_as, before, after}, each image
                              {kind, sha256, size, mode, uid, gid, owner, group, target} or null (the file was absent)
  revisions/N/before/NAME     the file's bytes before the run (NAME: stored_as, a safe encoding of the path)
  revisions/N/after/NAME      its bytes once the run was confirmed

Revision 1 of a server is the state its first recorded run found (`origin: found`): the before-images of the files
that run changed, both its before and its after (nothing changed it). That run records itself as revision 2, every
later one as the next number, so undoing to revision N writes back N's after-images and, for a file only a later
revision touched, that later revision's before-image.

A revision is written into a hidden folder beside the others and renamed to its number: a reader sees a whole
revision or none. Recording runs under the guard's lock, at the confirmation, from the bytes the guard kept at its
arm and the live files; every folder and file is root's, 0700 and 0600, under the guard's trust rule
(_files.distrust), which every action checks first.

Standard library only.
"""

from __future__ import annotations

import errno
import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
import time
from typing import Any, Callable
from urllib.parse import quote

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import (
    UntrustedPath,
    distrust,
    make_private_folder,
    read_bytes,
    read_json_trusted,
    system_folder_refusal,
    write_atomic,
)

FORMAT = 1
FOLDER = 'revisions'
INDEX = 'revision.json'
# A path's encoding is a file name: NAME_MAX is 255 bytes on every Linux file system; longer ones are named by hash.
NAME_LIMIT = 200
# What an index and its folders cost beyond the files' bytes, in the estimate before the window.
INDEX_ALLOWANCE = 64 * 1024
# The free space a revision must leave on its file system, unless the caller says otherwise.
DEFAULT_MARGIN_MIB = 256
KEPT_DEFAULT = 5


class RevisionError(Exception):
    """The revisions cannot be read or written; the message says what was found and what to do."""


# --- pure: names, images, changes, numbers, space -------------------------------------------

def stored_name(path: str) -> str:
    """The file name a path's bytes are kept under: the path percent-encoded ('/' included, so no name leads out of
    its folder), or `sha256-HEX` of the path where that would be longer than NAME_LIMIT."""
    encoded = quote(path, safe='')
    if len(encoded) <= NAME_LIMIT:
        return encoded
    return 'sha256-' + hashlib.sha256(path.encode('utf-8', 'surrogateescape')).hexdigest()


def _name_of(uid: int | None, lookup: Callable, attribute: str) -> str | None:
    if uid is None:
        return None
    try:
        return getattr(lookup(uid), attribute)
    except KeyError:
        return str(uid)


def image(kind: str, mode: int | None, uid: int | None, gid: int | None, data: bytes | None = None,
          target: str | None = None) -> dict[str, Any]:
    """One state of a file as an index keeps it (mode as an octal string, owner and group by name and by id)."""
    return {
        'kind': kind,
        'sha256': hashlib.sha256(data).hexdigest() if data is not None else None,
        'size': len(data) if data is not None else len((target or '').encode('utf-8', 'surrogateescape')),
        'mode': '%04o' % mode if mode is not None else None,
        'uid': uid, 'gid': gid,
        'owner': _name_of(uid, pwd.getpwuid, 'pw_name'),
        'group': _name_of(gid, grp.getgrgid, 'gr_name'),
        'target': target,
    }


def change_of(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str | None:
    """What a run did to a file, in the listing's words; None when nothing (bytes, link, mode, owner) differs."""
    if before is None and after is None:
        return None
    if before is None:
        return 'created'
    if after is None:
        return 'removed'
    if (before['kind'], before['sha256'], before['target']) != (after['kind'], after['sha256'], after['target']):
        return 'modified'
    differ = [label for label, keys in (('mode', ('mode',)), ('owner', ('uid', 'gid')))
              if any(before[key] is not None and after[key] is not None and before[key] != after[key] for key in keys)]
    return ' and '.join(differ) + ' changed' if differ else None


def numbers_to_write(existing: list[int], kept: int) -> tuple[list[int], list[int]]:
    """(the numbers this recording writes, the numbers it prunes then) for a server with `existing` revisions, keeping
    the last `kept`: none yet, revision 1 (as found) and 2; else the next number. A number that would be pruned at once
    (kept 1 on a first recording) is not written."""
    if kept < 1:
        return [], []
    new = [max(existing) + 1] if existing else [1, 2]
    every = sorted(existing) + new
    keep = every[-kept:]
    return [number for number in new if number in keep], [number for number in sorted(existing) if number not in keep]


def estimate_bytes(sizes: list[int], first: bool) -> int:
    """What a revision of files of these sizes takes: each before and after (the after taken as large as the before),
    and on a first recording revision 1 too, plus an allowance per index."""
    copies = 4 if first else 2
    return copies * sum(sizes) + (2 if first else 1) * INDEX_ALLOWANCE


def space_problem(needed: int, free: int, margin: int, where: str) -> str:
    """Why a revision of `needed` bytes cannot be written where `free` bytes are available ("" when it can)."""
    if free - needed >= margin:
        return ''
    return ('a revision of this server (about %d bytes) would leave %d of the %d bytes free on the file system of %s, '
            'below the margin of %d bytes: free space there (or lower sglang_revisions_kept, or set it to 0 to record '
            'no revisions) before running again' % (needed, max(free - needed, 0), free, where, margin))


def summary(index: dict[str, Any], size: int) -> dict[str, Any]:
    """A revision as the listing shows it."""
    return {
        'number': index.get('number'), 'origin': index.get('origin'), 'time': index.get('time'),
        'time_utc': index.get('time_utc'), 'run_id': index.get('run_id'), 'host': index.get('host'),
        'sglang_version': index.get('sglang_version'), 'patch_sha256': index.get('patch_sha256'),
        'changed': [{'path': entry.get('path'), 'change': entry.get('change')} for entry in index.get('files') or []],
        'size_bytes': size,
    }


# --- the files -----------------------------------------------------------------------

def _utc(seconds: float) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(seconds))


def live_image(path: str) -> tuple[dict[str, Any] | None, bytes | None]:
    """The file at path as it is now: (image, bytes); (None, None) when it is not there."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None, None
        raise
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return image('symlink', mode, info.st_uid, info.st_gid, target=os.readlink(path)), None
    if not stat.S_ISREG(info.st_mode):
        raise RevisionError('%s is not a regular file or a symlink (%s): a revision keeps files only'
                            % (path, stat.filemode(info.st_mode)))
    data = read_bytes(path)
    return image('file', mode, info.st_uid, info.st_gid, data), data


def kept_image(entry: dict[str, Any]) -> tuple[dict[str, Any] | None, bytes | None]:
    """A file's pre-run state from the guard's state entry and the bytes it kept (files/N): (image, bytes)."""
    if not entry.get('existed'):
        return None, None
    if entry.get('kind') == 'symlink':
        return image('symlink', entry.get('mode'), entry.get('uid'), entry.get('gid'), target=entry['target']), None
    data = read_bytes(entry['backup'])
    if hashlib.sha256(data).hexdigest() != entry.get('sha256'):
        raise RevisionError('the bytes the guard kept of %s are damaged (their sha256 differs from the arm\'s)'
                            % entry['path'])
    return image('file', entry.get('mode'), entry.get('uid'), entry.get('gid'), data), data


def folder_size(path: str) -> int:
    """Bytes of every file below path (as stored, not counting the folders themselves)."""
    total = 0
    for where, _folders, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(where, name)).st_size
            except OSError:
                continue
    return total


def free_bytes(path: str, statvfs: Callable = os.statvfs) -> tuple[int, str]:
    """(bytes available to the user, the folder asked) on the file system of path, or of its nearest folder that
    exists."""
    where = os.path.abspath(path)
    while not os.path.isdir(where) and where != '/':
        where = os.path.dirname(where)
    found = statvfs(where)
    return found.f_bavail * found.f_frsize, where


class Revisions:
    """The revisions of the server whose guard folder is `guard_folder` (kept in guard_folder/revisions)."""

    def __init__(self, guard_folder: str, statvfs: Callable = os.statvfs, clock: Callable = time.time) -> None:
        self.guard_folder = guard_folder
        self.folder = os.path.join(guard_folder, FOLDER)
        self.statvfs = statvfs
        self.clock = clock

    def check_folder(self) -> None:
        """RevisionError unless the folder is one only root can change (the guard's trust rule, its own checks)."""
        refusal = system_folder_refusal(os.path.abspath(self.guard_folder))
        if refusal:
            raise RevisionError('the guard folder %s %s: revisions are kept in the server\'s own guard folder '
                                '(sglang_guard_dir/SERVICE); nothing was read or written' % (self.guard_folder, refusal))
        problem = distrust(self.folder)
        if problem:
            raise RevisionError('the revisions folder %s is not safe: %s. The undo writes back what it keeps there as '
                                'root, so every folder from / down to it must belong to root and be writable by no one '
                                'else; fix the owner and mode (docs/guard.md, docs/undo.md). Nothing was read or written'
                                % (self.folder, problem))

    def numbers(self) -> list[int]:
        """The revisions kept, oldest first ([] when there is none)."""
        try:
            names = os.listdir(self.folder)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return []
            raise
        return sorted(int(name) for name in names if name.isdigit() and name == str(int(name)))

    def index(self, number: int) -> dict[str, Any]:
        path = os.path.join(self.folder, str(number), INDEX)
        try:
            found = read_json_trusted(path)
        except UntrustedPath as exc:
            raise RevisionError('%s is not safe to read: %s' % (path, exc))
        except ValueError:
            raise RevisionError('%s is not valid JSON' % path)
        if not isinstance(found, dict):
            raise RevisionError('%s holds no revision index' % path)
        return found

    def listed(self) -> tuple[list[dict[str, Any]], list[str]]:
        """(each revision's summary, oldest first; a problem per revision that cannot be read)."""
        self.check_folder()
        found, problems = [], []
        for number in self.numbers():
            try:
                found.append(summary(self.index(number), folder_size(os.path.join(self.folder, str(number)))))
            except (RevisionError, OSError) as exc:
                problems.append('revision %d: %s' % (number, exc))
        return found, problems

    def space(self, needed: int, margin: int) -> dict[str, Any]:
        """The numbers of the space check: needed, free, margin, where, and the problem ("" when it fits)."""
        free, where = free_bytes(self.folder, self.statvfs)
        return {'needed_bytes': needed, 'free_bytes': free, 'margin_bytes': margin, 'where': where,
                'problem': space_problem(needed, free, margin, where)}

    def check(self, files: list[str], kept: int, margin: int) -> dict[str, Any]:
        """Whether the revision a run over `files` would record fits the disk (estimate_bytes, the live sizes)."""
        self.check_folder()
        if kept < 1:
            return {'needed_bytes': 0, 'free_bytes': None, 'margin_bytes': margin, 'where': None, 'problem': ''}
        sizes = []
        for path in sorted(set(files)):
            found, data = live_image(path)
            sizes.append(len(data) if data is not None else (found or {}).get('size', 0))
        return self.space(estimate_bytes(sizes, first=not self.numbers()), margin)

    def record(self, entries: list[dict[str, Any]], meta: dict[str, Any], kept: int, margin: int) -> dict[str, Any]:
        """Record what a confirmed run changed, from the guard's state entries (its kept bytes) and the live files.

        Returns {numbers, number, pruned, size_bytes, files, problem}: numbers [] and problem "" when nothing changed (or
        kept is 0), a problem (and nothing written) when the revision would not fit. Raises RevisionError or OSError otherwise; the
        caller decides what a failure means (at the confirmation: a warning, never a failed confirm)."""
        self.check_folder()
        result = {'numbers': [], 'number': None, 'pruned': [], 'size_bytes': 0, 'files': [], 'problem': ''}
        changed = []
        for entry in sorted(entries, key=lambda item: item['path']):
            before, before_data = kept_image(entry)
            after, after_data = live_image(entry['path'])
            change = change_of(before, after)
            if change:
                changed.append((entry['path'], change, before, before_data, after, after_data))
        if not changed or kept < 1:
            return result
        existing = self.numbers()
        write, prune = numbers_to_write(existing, kept)
        needed = sum(len(item[3] or b'') + len(item[5] or b'') for item in changed) * (2 if 1 in write else 1)
        space = self.space(needed + len(write) * INDEX_ALLOWANCE, margin)
        if space['problem']:
            result['problem'] = space['problem']
            return result
        make_private_folder(self.folder)
        self._clear_leftovers()
        now = self.clock()
        for number in write:
            if number == 1:
                # Written only on a first recording: the state this run found, as its own revision.
                files = [(path, 'found', before, before_data, before, before_data)
                         for path, _change, before, before_data, _after, _after_data in changed]
                header = {'origin': 'found', 'time': meta.get('armed_at') or now, 'run_id': meta.get('run_id'),
                          'sglang_version': meta.get('found_sglang_version'), 'patch_sha256': None, 'report': None}
            else:
                files = changed
                header = {'origin': 'redeploy', 'time': now, 'run_id': meta.get('run_id'),
                          'sglang_version': meta.get('sglang_version'), 'patch_sha256': meta.get('patch_sha256'),
                          'report': meta.get('report')}
            header.update(time_utc=_utc(header['time']), host=meta.get('host'))
            self._write(number, header, files)
        for number in prune:
            shutil.rmtree(os.path.join(self.folder, str(number)), ignore_errors=True)
        last = write[-1]
        result.update(numbers=write, number=last, pruned=prune,
                      size_bytes=folder_size(os.path.join(self.folder, str(last))),
                      files=[{'path': item[0], 'change': item[1]} for item in changed])
        return result

    def _clear_leftovers(self) -> None:
        """A recording cut short leaves a hidden folder, never a number: it is removed (under the guard's lock)."""
        for name in os.listdir(self.folder):
            if name.startswith('.new-'):
                shutil.rmtree(os.path.join(self.folder, name), ignore_errors=True)

    def _write(self, number: int, header: dict[str, Any], files: list[tuple]) -> None:
        staging = os.path.join(self.folder, '.new-%d-%d' % (number, os.getpid()))
        make_private_folder(staging)
        listed = []
        for path, change, before, before_data, after, after_data in files:
            name = stored_name(path)
            for side, data in (('before', before_data), ('after', after_data)):
                if data is not None:
                    make_private_folder(os.path.join(staging, side))
                    write_atomic(os.path.join(staging, side, name), data, 0o600)
            listed.append({'path': path, 'change': change, 'stored_as': name, 'before': before, 'after': after})
        index = dict(header, format=FORMAT, number=number, files=listed)
        write_atomic(os.path.join(staging, INDEX), json.dumps(index, indent=1, sort_keys=True).encode('utf-8'), 0o600)
        os.rename(staging, os.path.join(self.folder, str(number)))


def record_confirmed(guard_folder: str, state: dict[str, Any], kept: int, margin: int, meta: dict[str, Any],
                     statvfs: Callable = os.statvfs) -> dict[str, Any]:
    """The recording at a confirmation (sglang_guard's before_drop), which never raises: the run is confirmed whatever
    happens here, so a failure is the result's `problem` (recorded false), for a warning and the report."""
    meta = dict(meta, run_id=state.get('run_id'), host=state.get('host'), armed_at=state.get('armed_at'))
    try:
        found = Revisions(guard_folder, statvfs).record(state.get('files') or [], meta, kept, margin)
    except Exception as exc:  # the confirmation must stand: any failure, a bug included, is reported instead
        found = {'numbers': [], 'number': None, 'pruned': [], 'size_bytes': 0, 'files': [],
                 'problem': '%s (%s)' % (exc, type(exc).__name__)}
    if found['problem']:
        found['problem'] = ('no revision was recorded of run %s: %s; the redeploy stands confirmed, but it cannot be '
                            'undone from a revision' % (state.get('run_id'), found['problem']))
    return dict(found, recorded=bool(found['numbers']), kept=kept)
