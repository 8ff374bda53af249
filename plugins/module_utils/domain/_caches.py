# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server's compile caches (Triton, TorchInductor, FlashInfer, DeepGEMM): folders kept across restarts (issue 45).

Domain layer. A compile cache holds code the server loads and runs (Triton's and DeepGEMM's cubins, Inductor's
generated Python), so a cache folder another user can write is a way to run code as the server's user. The rule is
the guard's (docs/security.md), with the server's user in root's place for the folder itself:

- every folder above it is trusted as the guard trusts its own (_files.distrust: root's, writable by neither its
  group nor others, symlinks followed as the kernel follows them), and the server's user can pass through each;
- the folder itself is no symlink, is the server user's own and is writable by neither its group nor others.

A missing folder is made, the server user's, 0700 (the folders above it root's, 0755, so that user can pass).
Nothing is made while any folder is refused: a refusal comes before anything is made, and before anything stops.

    cache_folders(paths, owner, make) -> CacheRun: each folder with the files found in it and whether it was made
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import distrust, system_folder_refusal
from ansible_collections.gpuops.sglang.plugins.module_utils.base._identity import Identity
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import user_named

CACHE_MODE = 0o700
# What a missing folder above a cache folder is made with: root's, and passable by the server's user.
PARENT_MODE = 0o755


class UntrustedCache(Exception):
    """A cache folder that cannot be used: the message names each folder, its owner and mode, and what to do."""


@dataclass
class CacheRun:
    """[{path, files, made}] in the order given, and the folders made (or, in check mode, to be made) on the way."""

    folders: list[dict[str, Any]] = field(default_factory=list)
    made: list[dict[str, str]] = field(default_factory=list)

    @property
    def files(self) -> int:
        return sum(entry['files'] for entry in self.folders)


def _described(path: str, info: os.stat_result) -> str:
    return '%s (owner %s, mode %04o)' % (path, user_named(info.st_uid), stat.S_IMODE(info.st_mode))


def _unpassable(path: str, owner: Identity) -> str | None:
    """The first folder from / down to the existing folder path that owner cannot pass through, by its mode bits
    (an ACL that grants more is not read: such a folder is refused, which says so, rather than guessed)."""
    if owner.uid == 0:
        return None
    current = '/'
    for name in [part for part in path.split('/') if part] + ['']:
        info = os.stat(current)
        if not (info.st_uid == owner.uid or info.st_mode & 0o001 or (info.st_mode & 0o010 and info.st_gid in owner.groups)):
            return _described(current, info)
        current = posixpath.join(current, name)
    return None


def _existing(path: str) -> str:
    """path when it exists, else the nearest folder above it that does."""
    while not os.path.lexists(path):
        path = posixpath.dirname(path)
    return path


def folder_refusal(path: str, owner: Identity) -> str | None:
    """Why path cannot be a cache folder of owner's (None: it can, or it is missing and may be made)."""
    if not posixpath.isabs(path):
        return '%s is not an absolute path' % path
    path = posixpath.normpath(path)
    refusal = system_folder_refusal(path)
    if refusal:
        return '%s %s; name a folder of its own, such as /var/cache/sglang/SERVICE/triton' % (path, refusal)
    parent = posixpath.dirname(path)
    problem = distrust(parent)
    if problem:
        return ('the folder above %s cannot be trusted: %s; the folders above a cache folder must be root\'s and'
                ' writable by no one else' % (path, problem))
    # The folder itself is held below; what leads to it (or, missing, to where it will be made) must be passable.
    blocked = _unpassable(posixpath.dirname(path) if os.path.lexists(path) else _existing(path), owner)
    if blocked:
        return ('the server user %s cannot pass through %s on the way to %s, so it could not use its cache there; give'
                ' that folder o+x (or g+x with a group of that user)' % (owner.user, blocked, path))
    try:
        info = os.lstat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            return 'cannot read %s: %s' % (path, exc.strerror)
        return None
    if stat.S_ISLNK(info.st_mode):
        return ('%s is a symlink (to %s): whoever can change where it points chooses the code the server loads;'
                ' remove it, and it is made as a folder' % (path, os.readlink(path)))
    if not stat.S_ISDIR(info.st_mode):
        return '%s is not a folder; remove it, and it is made as one' % _described(path, info)
    if info.st_uid != owner.uid:
        return ('%s is not the server user %s\'s own: the server could not write its cache there; chown it to %s'
                ' (or remove it, and it is made)' % (_described(path, info), owner.user, owner.user))
    if info.st_mode & 0o022:
        writers = ' and '.join(who for who, bit in (('its group', 0o020), ('others', 0o002)) if info.st_mode & bit)
        return ('%s is writable by %s: another user could put code there that the server loads and runs;'
                ' chmod 0700 it' % (_described(path, info), writers))
    return None


def count_files(path: str) -> int:
    """The files under path (symlinks not followed); 0 for a missing folder."""
    return sum(len(names) for dummy, dummy_dirs, names in os.walk(path))


def _missing_above(path: str) -> list[str]:
    """The folders above path that do not exist, top first."""
    missing = []
    parent = posixpath.dirname(path)
    while not os.path.lexists(parent):
        missing.insert(0, parent)
        parent = posixpath.dirname(parent)
    return missing


def _make(path: str, owner: Identity) -> None:
    umask = os.umask(0o022)
    try:
        for parent in _missing_above(path):
            os.mkdir(parent, PARENT_MODE)
        os.mkdir(path, CACHE_MODE)
    finally:
        os.umask(umask)
    os.chmod(path, CACHE_MODE)
    if (owner.uid, owner.gid) != (os.geteuid(), os.getegid()):
        os.chown(path, owner.uid, owner.gid)


def cache_folders(paths: list[str], owner: Identity, make: bool = True) -> CacheRun:
    """Check every folder of paths, then make the missing ones (unless not make: check mode): a CacheRun.
    UntrustedCache naming every refused folder, before anything is made."""
    refusals = [why for why in (folder_refusal(path, owner) for path in paths) if why]
    if refusals:
        raise UntrustedCache('the compile cache folders are refused before anything stops: %s' % '; '.join(refusals))
    run = CacheRun()
    for given in paths:
        path = posixpath.normpath(given)
        missing = not os.path.lexists(path)
        if missing:
            run.made.extend(dict(path=parent, owner='root', mode='%04o' % PARENT_MODE) for parent in _missing_above(path)
                            if parent not in [entry['path'] for entry in run.made])
            run.made.append(dict(path=path, owner=owner.user, mode='%04o' % CACHE_MODE))
            if make:
                _make(path, owner)
        run.folders.append(dict(path=path, files=0 if missing else count_files(path), made=missing))
    return run
