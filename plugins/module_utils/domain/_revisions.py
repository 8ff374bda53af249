# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server's revision history on its host: what each confirmed redeploy changed, before and after (issue 46).

Layout, in the server's guard folder (the role's sglang_guard_dir/SERVICE; docs/undo.md, "Revisions"):
  revisions/N/revision.json   the index: number, origin (found, redeploy or undo), undo_to (the revision an undo put
                              back, else null), time, run id, sglang version, patch SHA-256, the report's
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
import re
import shutil
import stat
import time
from typing import Any, Callable
from urllib.parse import quote

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import (
    UntrustedPath,
    distrust,
    fsync_dir,
    make_private_folder,
    read_bytes,
    read_json_trusted,
    system_folder_refusal,
    unlink_quietly,
    write_atomic,
    write_beside,
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
ORIGINS = ('found', 'redeploy', 'undo')
SHA256 = re.compile(r'[0-9a-f]{64}\Z')
MODE = re.compile(r'[0-7]{3,4}\Z')


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
        'number': index.get('number'), 'origin': index.get('origin'), 'undo_to': index.get('undo_to'),
        'time': index.get('time'),
        'time_utc': index.get('time_utc'), 'run_id': index.get('run_id'), 'host': index.get('host'),
        'sglang_version': index.get('sglang_version'), 'patch_sha256': index.get('patch_sha256'),
        'changed': [{'path': entry.get('path'), 'change': entry.get('change')} for entry in index.get('files') or []],
        'size_bytes': size,
    }


def _image_problem(found: Any) -> str:
    if found is None:
        return ''
    if not isinstance(found, dict):
        return 'an image is %s, not an object' % type(found).__name__
    if found.get('kind') == 'file':
        if not isinstance(found.get('sha256'), str) or not SHA256.match(found['sha256']):
            return 'a file image has no SHA-256 (%r)' % (found.get('sha256'),)
    elif found.get('kind') == 'symlink':
        if not isinstance(found.get('target'), str) or not found['target']:
            return 'a symlink image has no target'
    else:
        return 'an image has kind %r (file or symlink expected)' % (found.get('kind'),)
    if found.get('mode') is not None and not (isinstance(found['mode'], str) and MODE.match(found['mode'])):
        return 'an image has mode %r (an octal string expected)' % (found['mode'],)
    for key in ('uid', 'gid'):
        if found.get(key) is not None and (not isinstance(found[key], int) or isinstance(found[key], bool) or found[key] < 0):
            return 'an image has %s %r (a whole number expected)' % (key, found[key])
    return ''


def index_problem(index: Any, number: int) -> str:
    """Why a revision index cannot be believed ("" when it can): not an object, another number, an origin or an image
    this collection never writes, or a file whose path is not absolute and normalised (an undo writes there as root,
    so `/etc/../x`, `etc/x` or `//x` are refused, not resolved) or whose stored copy is not a plain name."""
    if not isinstance(index, dict):
        return 'it holds no revision index (%s)' % type(index).__name__
    if index.get('number') != number:
        return 'it says it is revision %r' % (index.get('number'),)
    if index.get('origin') not in ORIGINS:
        return 'its origin is %r (one of %s expected)' % (index.get('origin'), ', '.join(ORIGINS))
    undo_to = index.get('undo_to')
    if undo_to is not None and (not isinstance(undo_to, int) or isinstance(undo_to, bool) or not 1 <= undo_to < number):
        return 'its undo_to is %r (an earlier revision number expected)' % (undo_to,)
    files = index.get('files')
    if not isinstance(files, list):
        return 'it has no list of files'
    seen = set()
    for entry in files:
        if not isinstance(entry, dict):
            return 'a file entry is %s, not an object' % type(entry).__name__
        path = entry.get('path')
        if not isinstance(path, str) or not os.path.isabs(path) or os.path.normpath(path) != path or path.startswith('//'):
            return 'a file path %r is not absolute and normalised' % (path,)
        if path in seen:
            return '%s is listed twice' % path
        seen.add(path)
        name = entry.get('stored_as')
        if not isinstance(name, str) or not name or '/' in name or name in ('.', '..') or '\0' in name:
            return 'the copy of %s is named %r: not a file name of its folder' % (path, name)
        for side in ('before', 'after'):
            problem = _image_problem(entry.get(side))
            if problem:
                return '%s of %s: %s' % (side, path, problem)
    return ''


# --- pure: the undo ------------------------------------------------------------------

def _same_image(found: dict[str, Any] | None, wanted: dict[str, Any] | None) -> bool:
    """Whether a live file is the state an index recorded: bytes (or link target), kind, mode and owner."""
    if found is None or wanted is None:
        return found is None and wanted is None
    if (found['kind'], found['sha256'], found['target']) != (wanted['kind'], wanted['sha256'], wanted['target']):
        return False
    # A mode or owner the index does not know (an arm of an older release) is not held against the file.
    return all(wanted.get(key) is None or found.get(key) == wanted[key] for key in ('mode', 'uid', 'gid'))


def undo_files(indexes: dict[int, dict[str, Any]], target: int) -> list[dict[str, Any]]:
    """What putting a server back to revision `target` writes, from the indexes of the revisions after it.

    A file's state at revision N is the before-image of the first revision after N that changed it (revision 1 holds
    the state found, so every file any revision changed has one); it is live now as the after-image of the last
    revision that changed it. Each entry: path, want (the image to put back, None to remove the file), source (the
    revision whose before/ holds its bytes), stored_as, current (the after-image expected live)."""
    found: dict[str, dict[str, Any]] = {}
    for number in sorted(number for number in indexes if number > target):
        for entry in indexes[number].get('files') or []:
            path = entry['path']
            if path not in found:
                found[path] = {'path': path, 'want': entry.get('before'), 'source': number,
                               'stored_as': entry.get('stored_as')}
            found[path]['current'] = entry.get('after')
    return [found[path] for path in sorted(found)]


def undo_target_problem(numbers: list[int], target: int | None) -> tuple[int | None, str]:
    """(the revision to put back, why it cannot be: "" when it can) for a server with revisions `numbers` kept; target
    None is the revision before the latest."""
    if not numbers:
        return None, ('this server has no revision: nothing was recorded yet (a confirmed redeploy with '
                      'sglang_revisions_kept above 0 records one), so there is nothing to undo to')
    latest = numbers[-1]
    wanted = latest - 1 if target is None else target
    kept = ', '.join(str(number) for number in numbers)
    if wanted == latest:
        return wanted, ('revision %d is the current one (the latest): nothing to undo; name an earlier one of those kept '
                        '(%s) with sglang_undo_to' % (wanted, kept))
    if wanted not in numbers:
        why = 'beyond the latest' if wanted > latest else 'pruned (sglang_revisions_kept keeps the last ones)'
        return wanted, ('revision %d is not kept (%s): the revisions kept are %s; name one of them with sglang_undo_to'
                        % (wanted, why, kept))
    missing = [number for number in range(wanted + 1, latest + 1) if number not in numbers]
    if missing:
        return wanted, ('revisions %s between %d and the latest %d are missing (removed by hand?): the files they changed '
                        'cannot be put back; undo to a revision after them' % (missing, wanted, latest))
    return wanted, ''


def changed_by_hand(files: list[dict[str, Any]], live: dict[str, dict[str, Any] | None]) -> list[str]:
    """The files whose live state is not the current revision's after-image (changed since its run, by hand or by
    something else): an undo would overwrite what it never recorded."""
    return [entry['path'] for entry in files if not _same_image(live.get(entry['path']), entry['current'])]


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
        problem = index_problem(found, number)
        if problem:
            raise RevisionError('%s is not an index this collection wrote: %s. Nothing of it is believed; remove that '
                                'revision folder (and undo only to a revision after it) or put back its index'
                                % (path, problem))
        return found

    def copy_path(self, number: int, side: str, name: str) -> str:
        return os.path.join(self.folder, str(number), side, name)

    def copy_problems(self, number: int, index: dict[str, Any]) -> list[str]:
        """Each kept copy (before/ and after/) of a revision that is missing or whose SHA-256 is not its index's."""
        problems = []
        for entry in index['files']:
            for side in ('before', 'after'):
                want = entry.get(side)
                if want is None or want['kind'] != 'file':
                    continue
                path = self.copy_path(number, side, entry['stored_as'])
                problem = _read_copy(path, want['sha256'])[1]
                if problem:
                    problems.append('the %s-image of %s (%s %s)' % (side, entry['path'], path, problem))
        return problems

    def listed(self) -> tuple[list[dict[str, Any]], list[str]]:
        """(each revision's summary, oldest first; a problem per revision that cannot be read)."""
        self.check_folder()
        found, problems = [], []
        for number in self.numbers():
            try:
                index = self.index(number)
                damaged = self.copy_problems(number, index)
                if damaged:
                    raise RevisionError('kept copies missing or damaged: %s; an undo that needs them is refused'
                                        % '; '.join(damaged))
                found.append(summary(index, folder_size(os.path.join(self.folder, str(number)))))
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
                header = {'origin': 'found', 'undo_to': None, 'time': meta.get('armed_at') or now,
                          'run_id': meta.get('run_id'),
                          'sglang_version': meta.get('found_sglang_version'), 'patch_sha256': None, 'report': None}
            else:
                files = changed
                # An undo (its confirmation passes the revision it put back) is told apart from a redeploy: an
                # alert's undo never undoes one (plan_undo's not_after_undo).
                undo_to = meta.get('undo_to')
                header = {'origin': 'undo' if undo_to is not None else 'redeploy', 'undo_to': undo_to,
                          'time': now, 'run_id': meta.get('run_id'),
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

    def plan_undo(self, target: int | None, not_after_undo: bool = False) -> dict[str, Any]:
        """What putting the server back to revision `target` (None: the one before the latest) writes, checked: the
        revision is kept, every later one too, every index is one this collection wrote, every file is live as the
        latest revision left it, and every kept copy the undo will write is there with its recorded SHA-256 (read
        now, so a missing or damaged one refuses the undo before anything stops, not inside the window). With
        `not_after_undo` (an undo an alert started), a latest revision that is itself an undo is refused too: the
        alert that keeps firing must not flip the server back. RevisionError (nothing written) otherwise.

        Returns {target, latest, kept, files, run_id}: files as undo_files, each with `action` (write, link or
        remove); run_id the run that recorded the target (the same on every node of a server group that the run
        redeployed together: what a group's undo checks its nodes go back to)."""
        self.check_folder()
        numbers = self.numbers()
        if not_after_undo and numbers:
            latest = self.index(numbers[-1])
            if latest['origin'] == 'undo':
                raise RevisionError('an alert undoes a redeploy, never an undo: the latest revision %d is the undo to %s '
                                    '(run %s); undo by hand with playbooks/undo.yml --limit HOST -e sglang_undo_to=N (N '
                                    'one of the revisions kept: %s) if the server must go back further; nothing was '
                                    'stopped' % (numbers[-1], latest.get('undo_to'), latest.get('run_id'),
                                                 ', '.join(str(number) for number in numbers)))
        wanted, problem = undo_target_problem(numbers, target)
        if problem:
            raise RevisionError(problem)
        indexes = {number: self.index(number) for number in numbers if number > wanted}
        files = undo_files(indexes, wanted)
        live = {entry['path']: live_image(entry['path'])[0] for entry in files}
        by_hand = changed_by_hand(files, live)
        if by_hand:
            raise RevisionError('changed since revision %d recorded them (by hand?): %s. Their live bytes, mode or owner '
                                'are not what the latest revision left, and the undo would overwrite what no revision '
                                'kept; put them back as they were, or record them with a redeploy, before undoing'
                                % (numbers[-1], ', '.join(by_hand)))
        for entry in files:
            want = entry['want']
            entry['action'] = 'remove' if want is None else ('link' if want['kind'] == 'symlink' else 'write')
            if entry['action'] == 'write':
                self.kept_bytes(entry)
        return {'target': wanted, 'latest': numbers[-1], 'kept': numbers, 'files': files,
                'run_id': self.index(wanted).get('run_id')}

    def kept_bytes(self, entry: dict[str, Any]) -> bytes:
        """The bytes of an undo entry's `want`, from its source revision's before/, checked against its SHA-256."""
        name = entry.get('stored_as') or ''
        if not name or '/' in name or name in ('.', '..'):
            raise RevisionError('revision %d names %r as the copy of %s: not a file name of its folder'
                                % (entry['source'], name, entry['path']))
        path = self.copy_path(entry['source'], 'before', name)
        data, problem = _read_copy(path, entry['want']['sha256'])
        if problem:
            raise RevisionError('%s (revision %d\'s copy of %s) %s; the undo cannot put that file back, so nothing was '
                                'written: undo to revision %d or a later one (which needs no copy of it), or restore the '
                                'copy' % (path, entry['source'], entry['path'], problem, entry['source']))
        return data

    def restore(self, plan: dict[str, Any], renew: Callable[[], Any] = lambda: None) -> list[dict[str, Any]]:
        """Put plan_undo's files back, all or nothing: every copy read and checked, every new file staged beside its
        target, then each renamed into place, the file it replaces kept under a hidden name until the last rename;
        a failure renames those back. A crash in between is the guard's to undo (its kept pre-run bytes)."""
        data = {entry['path']: self.kept_bytes(entry) for entry in plan['files'] if entry['action'] == 'write'}
        staged: list[tuple[dict[str, Any], str | None]] = []
        try:
            for entry in plan['files']:
                renew()
                staged.append((entry, _stage(entry, data.get(entry['path']))))
            _swap(staged)
        finally:
            for _entry, temp in staged:
                if temp is not None:
                    unlink_quietly(temp)
        for folder in sorted({os.path.dirname(entry['path']) for entry in plan['files']}):
            fsync_dir(folder)
        return [{'path': entry['path'], 'action': entry['action'], 'source': entry['source'],
                 'sha256': (entry['want'] or {}).get('sha256')} for entry in plan['files']]

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


def _read_copy(path: str, sha256: str) -> tuple[bytes | None, str]:
    """(a kept copy's bytes, ""), or (None, why they are not the bytes its index names)."""
    try:
        data = read_bytes(path)
    except OSError as exc:
        return None, 'cannot be read: %s' % (exc.strerror or exc)
    if hashlib.sha256(data).hexdigest() != sha256:
        return None, 'is damaged: its SHA-256 differs from the index'
    return data, ''


def _mode_of(want: dict[str, Any]) -> int:
    return int(want['mode'], 8) if want.get('mode') else 0o644


def _stage(entry: dict[str, Any], data: bytes | None) -> str | None:
    """The new file (or link) beside its target, with its recorded mode and owner; None for a removal."""
    want, path = entry['want'], entry['path']
    owner = (want['uid'], want['gid']) if want and want.get('uid') is not None and want.get('gid') is not None else None
    if entry['action'] == 'write':
        return write_beside(path, data or b'', '.gpuops-undo', _mode_of(want), owner)
    if entry['action'] == 'link':
        folder, name = os.path.split(path)
        temp = os.path.join(folder, '.%s.%d.gpuops-undo' % (name, os.getpid()))
        unlink_quietly(temp)
        os.symlink(want['target'], temp)
        if owner is not None:
            try:
                os.lchown(temp, owner[0], owner[1])
            except OSError:
                pass  # not root: the link stays the writer's, as write_beside does for files
        return temp
    return None


def _swap(staged: list[tuple[dict[str, Any], str | None]]) -> None:
    """Rename each staged file over its target (or remove the target), the replaced file kept by a hard link until
    every rename is done; on any failure the files already replaced go back."""
    done: list[tuple[str, str | None]] = []
    keep = None
    try:
        for entry, temp in staged:
            path = entry['path']
            keep = None
            if os.path.lexists(path):
                keep = os.path.join(os.path.dirname(path), '.%s.%d.gpuops-undo-old' % (os.path.basename(path), os.getpid()))
                unlink_quietly(keep)
                os.link(path, keep, follow_symlinks=False)
            if temp is None:
                if keep is not None:
                    os.unlink(path)
            else:
                os.rename(temp, path)
            done.append((path, keep))
            keep = None
    except BaseException:
        if keep is not None:
            unlink_quietly(keep)  # the failed step left its target as it was
        for path, kept in reversed(done):
            if kept is not None:
                os.rename(kept, path)
            else:
                unlink_quietly(path)
        raise
    for _path, kept in done:
        if kept is not None:
            unlink_quietly(kept)


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
