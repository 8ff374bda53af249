# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who the server runs as (sglang_user, sglang_group), and what that user can read, checked as that user.

Base layer, standard library only: _server starts a detached server as its user, also from the host-side guard.

Root's view of a folder proves nothing about another user's: an NFS export with root_squash maps root to nobody,
and a folder 0700 of another owner is open to root alone. So the check runs in a child process that has dropped
to the user (initgroups, setgid, setuid, as systemd's User= and Group= do) and answers through a pipe; a parent
that cannot drop (not root) says so instead of guessing.

    identity(user, group)              -> Identity (UnknownIdentity when the user or group does not exist)
    folder_problems(identity, folders) -> [{label, path, why}] for the folders the user cannot use
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import select
import signal
import stat
import time
from dataclasses import dataclass
from typing import Any, Callable

# Seconds the child may take over every folder: a hung NFS mount must not hang the preflight.
CHECK_TIMEOUT = 30.0
# Unreadable files named in one message; the rest are counted.
NAMED_FILES = 5


class UnknownIdentity(LookupError):
    """The user or group does not exist on this host: `kind` says which (user, group), the message names it."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__('the %s %s does not exist on this host' % (kind, name))
        self.kind = kind


@dataclass(frozen=True)
class Identity:
    """A user as the server runs as it: names, ids, and the supplementary groups initgroups gives it."""

    user: str
    group: str
    uid: int
    gid: int
    groups: tuple

    @property
    def is_current(self) -> bool:
        """Whether this process already runs as it (nothing to drop)."""
        return (self.uid, self.gid) == (os.geteuid(), os.getegid())

    def become(self) -> None:
        """Drop to this identity; for a child process only (irreversible for a non-root identity)."""
        os.initgroups(self.user, self.gid)
        os.setgid(self.gid)
        os.setuid(self.uid)


def _entry(kind: str, name: str, by_name: Callable, by_id: Callable) -> pwd.struct_passwd:
    """The account database's entry of `name` (a name, else a number as systemd's User= takes one)."""
    try:
        return by_name(name)
    except KeyError:
        pass
    if name.isdigit():
        try:
            return by_id(int(name))
        except KeyError:
            pass
    raise UnknownIdentity(kind, name)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def identity(user: str | None, group: str | None = None) -> Identity:
    """The identity of `user` (None or "": this process's own) with `group` (None or "": the user's primary group)."""
    if not user:
        uid = os.geteuid()
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            gid = os.getegid()
            return Identity(str(uid), _group_name(gid), uid, gid, tuple(os.getgroups()))
    else:
        entry = _entry('user', user, pwd.getpwnam, pwd.getpwuid)
    gid = _entry('group', group, grp.getgrnam, grp.getgrgid).gr_gid if group else entry.pw_gid
    return Identity(entry.pw_name, _group_name(gid), entry.pw_uid, gid,
                    tuple(os.getgrouplist(entry.pw_name, gid)))


def folder_problem(path: str) -> str | None:
    """Why the calling user cannot load what the folder at path holds (None when it can): it must exist, be a folder
    (a link to one is one), be listable, and every regular file at its top level (links followed: a Hugging Face
    snapshot links its files to blobs) must open for reading."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return 'does not exist' if exc.errno == errno.ENOENT else 'cannot be reached (%s)' % exc.strerror
    if not stat.S_ISDIR(info.st_mode):
        return 'is not a folder'
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        return 'cannot be listed (%s)' % exc.strerror
    unreadable = []
    for name in names:
        full = os.path.join(path, name)
        try:
            if not stat.S_ISREG(os.stat(full).st_mode):
                continue
            os.close(os.open(full, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK))
        except OSError as exc:
            unreadable.append('%s (%s)' % (name, exc.strerror))
    if not unreadable:
        return None
    more = len(unreadable) - NAMED_FILES
    return '%d file(s) in it cannot be opened for reading: %s%s' % (
        len(unreadable), ', '.join(unreadable[:NAMED_FILES]), ' and %d more' % more if more > 0 else '')


def _problems_here(folders: list[dict[str, str]]) -> list[dict[str, str]]:
    found = []
    for entry in folders:
        why = folder_problem(entry['path'])
        if why:
            found.append({'label': entry['label'], 'path': entry['path'], 'why': why})
    return found


def _all(folders: list[dict[str, str]], why: str) -> list[dict[str, str]]:
    return [{'label': entry['label'], 'path': entry['path'], 'why': why} for entry in folders]


def folder_problems(who: Identity, folders: list[Any], timeout: float = CHECK_TIMEOUT) -> list[Any]:
    """[{label, path, why}] of folders ([{label, path}]) that `who` cannot load, each checked as `who` in a child
    process; [] when every one can be. Without root (and not already `who`) nothing can be checked: every folder is
    a problem that says so."""
    if not folders:
        return []
    if not who.is_current and os.geteuid() != 0:
        return _all(folders, 'cannot be checked as %s: this check runs as uid %d, and only root may switch users'
                    % (who.user, os.geteuid()))
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        # The child: never returns into the caller's code, whatever happens.
        status = 1
        try:
            os.close(reading)
            if not who.is_current:
                who.become()
            data = json.dumps(_problems_here(folders)).encode('utf-8')
            while data:
                data = data[os.write(writing, data):]
            status = 0
        finally:
            os._exit(status)
    os.close(writing)
    try:
        answer = _read_until(reading, time.monotonic() + timeout)
    finally:
        os.close(reading)
    if answer is None:
        _end(pid)
        return _all(folders, 'did not answer within %gs as %s (a hung network mount?)' % (timeout, who.user))
    status = os.waitpid(pid, 0)[1]
    if status != 0 or not answer:
        ended = ('exited with status %d' % os.WEXITSTATUS(status) if os.WIFEXITED(status)
                 else 'was ended by signal %d' % os.WTERMSIG(status))
        return _all(folders, 'could not be checked as %s (the checking process %s)' % (who.user, ended))
    return json.loads(answer.decode('utf-8'))


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe; None when the deadline passes first."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b''.join(chunks)
        chunks.append(chunk)


def _end(pid: int) -> None:
    """SIGKILL a child that hangs, and reap it when it goes (one blocked in an uninterruptible read stays a zombie
    of this short-lived process, not a wait)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.01)
