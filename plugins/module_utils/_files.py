# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files: the one lock, the one atomic write, and a JSON read.

Base layer, standard library only: the host-side guard installs and runs this without Ansible.

An atomic write is a temp file beside the target (same folder, so the same file system), written
and fsynced, given its mode and owner, then renamed over the target: a reader sees the old bytes or
the new ones, never half of them, and a crash leaves at most a temp file whose suffix names its writer.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import tempfile
import time

from ansible_collections.gpuops.sglang.plugins.module_utils._polling import poll_until


def read_bytes(path):
    with open(path, 'rb') as handle:
        return handle.read()


def read_json(path):
    """The JSON document at path; None when the file is not there (or cannot be read). ValueError when not JSON."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError):
        return None


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quietly(path):
    """Remove path; False when it was not there."""
    try:
        os.unlink(path)
        return True
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
        return False


def write_beside(target, data, suffix='.tmp', mode=0o600, owner=None, durable=True):
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


def write_atomic(path, data, mode=0o600, suffix='.tmp', owner=None, durable=True):
    """Put data at path atomically (a temp file beside it, renamed over it)."""
    temp = write_beside(path, data, suffix, mode, owner, durable)
    try:
        os.rename(temp, path)
    except Exception:
        unlink_quietly(temp)
        raise


def mode_and_owner(path):
    """(mode, (uid, gid) when this process may give files away, else None) of path: what a replacement keeps."""
    info = os.stat(path)
    return info.st_mode & 0o7777, ((info.st_uid, info.st_gid) if os.geteuid() == 0 else None)


class LockTimeout(Exception):
    """The lock was held by someone else for the whole wait."""


class FileLock(object):
    """An exclusive flock on a file or a folder, waited for at most ``timeout`` seconds.

    The kernel drops a flock when its holder dies, so a crashed run never leaves a stale lock. A folder
    needs no lock file (opened read-only); a file path is created (0600) when missing. ``hint`` ends the
    LockTimeout message: who else holds it and what to do.
    """

    def __init__(self, path, timeout, hint='', clock=time.monotonic, sleep=time.sleep, max_interval=1.0):
        self.path = path
        self.timeout = timeout
        self.hint = hint
        # A waiter re-tries at most this often: a short hold is seen at once, a long one costs few tries.
        self.max_interval = max_interval
        self.clock = clock
        self.sleep = sleep
        self.fd = None

    def _try(self):
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except (IOError, OSError) as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            return False

    def acquire(self):
        if os.path.isdir(self.path):
            self.fd = os.open(self.path, os.O_RDONLY)
        else:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if not poll_until(self._try, bool, self.timeout, first_interval=0.05, max_interval=self.max_interval,
                          clock=self.clock, sleep=self.sleep):
            self.release()
            raise LockTimeout('waited %gs for the lock on %s: %s' % (self.timeout, self.path, self.hint))
        return self

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False
