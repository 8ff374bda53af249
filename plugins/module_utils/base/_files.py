# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files: the one lock, the one atomic write, a JSON read, and the trusted-folder check.

Base layer, standard library only: the host-side guard installs and runs this without Ansible.

An atomic write is a temp file beside the target (same folder, so the same file system), written
and fsynced, given its mode and owner, then renamed over the target: a reader sees the old bytes or
the new ones, never half of them, and a crash leaves at most a temp file whose suffix names its writer.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import json
import os
import posixpath
import pwd
import stat
import tempfile
import time
from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until


def read_bytes(path: str) -> bytes:
    with open(path, 'rb') as handle:
        return handle.read()


def read_json(path: str) -> Any:
    """The JSON document at path; None when the file is not there (or cannot be read). ValueError when not JSON."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except OSError:
        return None


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> bool:
    """Remove path; False when it was not there."""
    try:
        os.unlink(path)
        return True
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
        return False


def write_beside(target: str, data: bytes, suffix: str = '.tmp', mode: int = 0o600,
                 owner: tuple[int, int] | None = None, durable: bool = True) -> str:
    """A new file in target's folder holding data, with mode and owner (uid, gid); returns its path.

    durable: fsynced before it is returned (what a rename over a file that must survive a crash needs).
    A chown that is refused (not root) leaves the writer as owner: what an unprivileged run can do.
    """
    directory, name = os.path.split(target)
    handle, temp = tempfile.mkstemp(prefix='.' + name + '.', suffix=suffix, dir=directory or '.')
    try:
        with os.fdopen(handle, 'wb') as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.chmod(temp, mode)
        if owner is not None:
            try:
                os.chown(temp, owner[0], owner[1])
            except OSError:
                pass
    except Exception:
        os.unlink(temp)
        raise
    return temp


def write_atomic(path: str, data: bytes, mode: int = 0o600, suffix: str = '.tmp', owner: tuple[int, int] | None = None,
                 durable: bool = True) -> None:
    """Put data at path atomically (a temp file beside it, renamed over it)."""
    temp = write_beside(path, data, suffix, mode, owner, durable)
    try:
        os.rename(temp, path)
    except Exception:
        unlink_quietly(temp)
        raise


def mode_and_owner(path: str) -> tuple[int, tuple[int, int]]:
    """(mode, (uid, gid) when this process may give files away, else None) of path: what a replacement keeps."""
    info = os.stat(path)
    return info.st_mode & 0o7777, ((info.st_uid, info.st_gid) if os.geteuid() == 0 else None)


# --- trust: what a root process may act on ---------------------------------------

# The kernel's own bound on symlinks followed while resolving one path (ELOOP past it).
MAX_SYMLINKS = 40


class UntrustedPath(Exception):
    """Another user could have written or replaced what lies at the path; the message says who and where."""


def _owners(euid: int) -> tuple[int, ...]:
    # root may change anything anyway: a folder of root's is as safe for another uid as one of its own.
    return (euid, 0) if euid != 0 else (0,)


# The one folder the server's folders may lie under although its group may write it: Ubuntu's /var/log
# (root:syslog 0775). Any other group-writable folder, a daemon's own included, is refused: a daemon that handles
# untrusted input (www-data, mail, lp) is the local user the trust rule keeps out.
SYSTEM_GROUP_WRITABLE = frozenset(['/var/log'])
# Debian's and Ubuntu's SYS_UID_MAX (login.defs): accounts at or below it are the system's, made by packages for
# their daemons; people get uids above it. nobody (65534) is above it, as it should be.
SYS_UID_MAX = 999


def system_group_members(gid: int) -> list[str] | None:
    """The names of the accounts that may write through group gid, when every one of them is a system account
    (uid 1 to SYS_UID_MAX): members listed in the group database and accounts whose primary group it is. None
    when the group is unknown, is a person's, or has no member at all (then nothing says whose it is)."""
    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return None
    accounts = {}
    for name in group.gr_mem:
        try:
            accounts[name] = pwd.getpwnam(name).pw_uid
        except KeyError:
            return None  # a member the account database does not know: nothing tells who it is
    accounts.update((entry.pw_name, entry.pw_uid) for entry in pwd.getpwall() if entry.pw_gid == gid)
    if not accounts or not all(0 < uid <= SYS_UID_MAX for uid in accounts.values()):
        return None
    return sorted(accounts)


def _has_acl(path: str) -> bool:
    """Whether path carries an access ACL: then its group bits are the ACL's mask, which may grant a person write."""
    try:
        os.getxattr(path, 'system.posix_acl_access', follow_symlinks=False)
    except OSError as exc:
        # ENODATA: no ACL; ENOTSUP: a file system without ACLs. Anything else: not known, so assume one.
        return exc.errno not in (errno.ENODATA, errno.ENOTSUP)
    return True


def _problem(path: str, info: os.stat_result, owners: tuple[int, ...], want_dir: bool = True,
             system_group_writers: bool = False) -> str | None:
    if want_dir and not stat.S_ISDIR(info.st_mode):
        return '%s is not a folder' % path
    if info.st_uid not in owners:
        return '%s belongs to uid %d, not to %s' % (path, info.st_uid, ' or '.join('uid %d' % uid for uid in owners))
    if (system_group_writers and path in SYSTEM_GROUP_WRITABLE and info.st_mode & 0o022 == 0o020
            and not _has_acl(path) and system_group_members(info.st_gid)):
        # Ubuntu's /var/log is root:syslog 0775: only the syslog daemon's account writes there besides root.
        return None
    if info.st_mode & 0o022:
        # Sticky or not: in a sticky folder another user still creates any name that is free (ours before we
        # make it), so what we find there would depend on who came first.
        writers = ' and '.join(who for who, bit in (('its group', 0o020), ('others', 0o002)) if info.st_mode & bit)
        return '%s is writable by %s (mode %04o)' % (path, writers, stat.S_IMODE(info.st_mode))
    return None


def distrust(path: str, euid: int | None = None, system_group_writers: bool = False) -> str | None:
    """Why a process running as euid must not trust the folder at path; None when it may.

    Trusted: every folder the kernel walks through to reach path, from / down, symlinks followed as the
    kernel follows them (each link read in a folder already found trusted, so nobody else can swap it), is a
    folder owned by euid or root and writable by neither its group nor others. Then nobody else can
    replace, create or rename anything there. The part of path that does not exist yet counts as trusted:
    only its trusted parent's owner can create it. An ACL granting another user write shows in the
    group bits of the mode (its mask), so it is refused too.

    With system_group_writers, /var/log (SYSTEM_GROUP_WRITABLE, and only it) is trusted although its group may
    write it, when it carries no ACL and only system accounts write through that group (system_group_members):
    the server's log lies under Ubuntu's /var/log (root:syslog 0775). The guard's own folder is held to the strict
    rule.
    """
    owners = _owners(os.geteuid() if euid is None else euid)
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    current = '/'
    problem = _problem(current, os.lstat(current), owners, system_group_writers=system_group_writers)
    if problem:
        return problem
    pending = path.split('/')
    links = 0
    while pending:
        name = pending.pop(0)
        if name in ('', '.'):
            continue
        if name == '..':
            # current never holds a symlink, so its lexical parent is the real one.
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            info = os.lstat(candidate)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            return 'cannot read %s: %s' % (candidate, exc)
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_SYMLINKS:
                return 'too many symlinks on the way to %s' % path
            target = os.readlink(candidate)
            if target.startswith('/'):
                current = '/'
            pending = target.split('/') + pending
            continue
        problem = _problem(candidate, info, owners, system_group_writers=system_group_writers)
        if problem:
            return problem
        current = candidate
    return None


# Folders of the operating system and of every other program: the role makes its folders 0750 and the guard its
# folder 0700, which on these would lock out the services that read them (and drop /tmp's sticky bit). Both keep
# their files in dedicated subfolders (/etc/sglang, /run/sglang, /var/log/sglang, /var/lib/gpuops-sglang/SERVICE).
SYSTEM_FOLDERS = frozenset([
    '/', '/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib32', '/lib64', '/libx32', '/media', '/mnt', '/opt',
    '/proc', '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var',
    '/etc/default', '/etc/systemd', '/etc/systemd/system', '/run/lock', '/run/user', '/run/systemd',
    '/usr/bin', '/usr/include', '/usr/lib', '/usr/lib64', '/usr/libexec', '/usr/local', '/usr/local/bin',
    '/usr/local/etc', '/usr/local/lib', '/usr/local/sbin', '/usr/local/share', '/usr/sbin', '/usr/share', '/usr/src',
    '/var/backups', '/var/cache', '/var/lib', '/var/local', '/var/lock', '/var/log', '/var/mail', '/var/opt',
    '/var/run', '/var/spool', '/var/tmp',
])
# Kernel file systems: nothing of the role's (or the guard's) belongs under them.
KERNEL_FOLDERS = ('/proc/', '/sys/', '/dev/')


def system_folder_refusal(path: str) -> str:
    """Why a folder made private (0700/0750) by this collection cannot be the absolute `path` ("" when it can)."""
    normal = posixpath.normpath(path)
    # normpath keeps a leading '//' (POSIX lets it mean something else); here it is the root.
    normal = '/' + normal.lstrip('/')
    if normal in SYSTEM_FOLDERS:
        return 'is the system folder %s' % normal
    if (normal + '/').startswith(KERNEL_FOLDERS):
        return 'is under /%s, a kernel file system' % normal.split('/')[1]
    return ''


def make_private_folder(path: str, mode: int = 0o700) -> None:
    """Create path (and every missing folder above it) with mode, whatever the umask; tighten an existing path to
    mode. UntrustedPath when any folder on the way is not trusted (distrust), before anything is made."""
    problem = distrust(path)
    if problem:
        raise UntrustedPath(problem)
    # os.makedirs gives the folders above the last one 0777 minus the umask: the umask decides them all.
    umask = os.umask(0o777 & ~mode)
    try:
        os.makedirs(path, mode, exist_ok=True)
    finally:
        os.umask(umask)
    if stat.S_IMODE(os.stat(path).st_mode) != mode:
        os.chmod(path, mode)
    problem = distrust(path)
    if problem:
        raise UntrustedPath(problem)


def read_json_trusted(path: str, euid: int | None = None) -> Any:
    """As read_json, for a file a root process acts on: UntrustedPath when it is a symlink, not a regular file,
    another user's, or writable by group or others (a file left from before its folder was made private).

    None only when the file is not there: any other error (EIO, EMFILE, EACCES...) is raised as OSError, since
    a caller that read None as "gone" would take a guard that is still armed for a confirmed one.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedPath('%s is a symlink' % path)
        if exc.errno == errno.ENOENT:
            return None
        raise
    with os.fdopen(fd, 'rb') as handle:
        problem = _problem(path, os.fstat(fd), _owners(os.geteuid() if euid is None else euid), want_dir=False)
        if problem is None and not stat.S_ISREG(os.fstat(fd).st_mode):
            problem = '%s is not a regular file' % path
        if problem:
            raise UntrustedPath(problem)
        return json.loads(handle.read().decode('utf-8'))


def open_append_no_follow(path: str, mode: int = 0o640) -> int:
    """A descriptor that appends to the regular file at path (made 0640 less the umask when missing: the server
    logs its arguments, keys included, at start), opened without following a link: UntrustedPath when path is a
    symlink, not a regular file, a file with another name too (a hard link), another user's file or one others may
    write, any of which could make a root process write into a file of someone else's choosing (another user who
    may write the folder linked a server's log to a root-owned file) or hand them what it writes. The caller
    closes it."""
    # O_NONBLOCK: a FIFO put there would block this open until someone reads it; it is refused below instead.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOCTTY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedPath('%s is a symlink' % path)
        if exc.errno == errno.ENXIO:
            raise UntrustedPath('%s is not a regular file (a FIFO or a socket)' % path)
        raise
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedPath('%s is not a regular file (%s)' % (path, stat.filemode(info.st_mode)))
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            # Another user's file (made first in a folder they could write), or one they may write: what the server
            # logs (its arguments, keys included, at start) would be theirs to read or to change.
            raise UntrustedPath('%s belongs to uid %d or may be written by others (mode %04o): not a file of this'
                                ' user\'s alone' % (path, info.st_uid, stat.S_IMODE(info.st_mode)))
        if info.st_nlink > 1:
            raise UntrustedPath('%s has %d names (hard links): what is written to it lands in a file known by'
                                ' another name too' % (path, info.st_nlink))
        fcntl.fcntl(descriptor, fcntl.F_SETFL, fcntl.fcntl(descriptor, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


class LockTimeout(Exception):
    """The lock was held by someone else for the whole wait."""


class FileLock:
    """An exclusive flock on a file or a folder, waited for at most ``timeout`` seconds.

    The kernel drops a flock when its holder dies, so a crashed run never leaves a stale lock. A folder
    needs no lock file (opened read-only); a file path is created (0600) when missing. ``hint`` ends the
    LockTimeout message: who else holds it and what to do.
    """

    def __init__(self, path: str, timeout: float, hint: str = '', clock: Callable = time.monotonic,
                 sleep: Callable = time.sleep, max_interval: float = 1.0) -> None:
        self.path = path
        self.timeout = timeout
        self.hint = hint
        # A waiter re-tries at most this often: a short hold is seen at once, a long one costs few tries.
        self.max_interval = max_interval
        self.clock = clock
        self.sleep = sleep
        self.fd = None

    def _try(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            return False

    def acquire(self) -> FileLock:
        if os.path.isdir(self.path):
            self.fd = os.open(self.path, os.O_RDONLY)
        else:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if not poll_until(self._try, bool, self.timeout, first_interval=0.05, max_interval=self.max_interval,
                          clock=self.clock, sleep=self.sleep):
            self.release()
            raise LockTimeout('waited %gs for the lock on %s: %s' % (self.timeout, self.path, self.hint))
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> bool:
        self.release()
        return False
