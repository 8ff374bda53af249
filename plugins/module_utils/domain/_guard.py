# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host-side rollback guard ("commit confirmed") for one SGLang server.

Armed before a redeploy stops anything, it keeps the exact pre-run bytes of every file
the run may change and how to run the previous server. Unless the run confirms the new
server in time, it restores those files and starts the previous server, on its own, on
the gpu host: a controller that was SIGKILLed, cancelled or cut off cannot leave a
server down.

Layout of the guard folder (one per server):
  lock         flock'ed by every arm, confirm and restore: one actor at a time
  state.json   present exactly while a guard is armed; written last on arm, removed last
               on restore, so a crash half-way through either leaves a state that the
               next restore finishes (restoring twice writes the same bytes)
  lease.json   the last renewal by the run's steps (_lease): the watcher restores when it
               lapses (the idle bound) or at the deadline, whichever comes first
  files/N      the pre-run bytes of each file
  fired.json   what the last restore did (the host-side report)
  lib/         this file and the policy files it imports, run without Ansible by the
               watcher: a transient systemd service where systemd runs, a detached process
               in its own session elsewhere; both poll the lease and the deadline
  watcher.log  the detached watcher's output (a systemd watcher's goes to the journal)
  revisions/   the server's revision history (_revisions, docs/undo.md), recorded at a confirmation from files/
               before they are dropped; nothing else of the guard touches it

The machine's servers share the folder above (the role's sglang_guard_dir), where window.json names the one guard
whose outage window is open (MachineWindow): one window at a time per machine, from the arm to the confirmation or
the restore.

The guard runs as root and acts on what it keeps here (it writes files back and starts the
command the launch configuration names): every action refuses a folder that another user could
have written, at any level from / down (_files.distrust), and everything it makes is 0700/0600.

Pure standard library plus this collection's own module_utils (installed into lib/).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import re
import socket
import stat
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import BoundedCall, CommandError, CommandRunner, subprocess_runner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import (
    HOST_CLOCK,
    LEASE_FILE,
    HostClock,
    arm_problem,
    armed_in_another_boot,
    deadline_passed,
    describe,
    due,
    lease_document,
    read_lease,
    restoring_mark,
    restoring_message,
    write_lease,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import (
    FileLock,
    LockTimeout,
    UntrustedPath,
    distrust,
    make_private_folder,
    read_bytes,
    read_json_trusted,
    system_folder_refusal,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import (
    FreeMemoryProof,
    GpuReader,
    NvidiaSmiError,
    gpus_over,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    ServerMarks,
    ServerOwnership,
    compile_patterns,
    select,
    terminate,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import LocalProcesses, protected_pids, user_named
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._router import Router, RouterError
from ansible_collections.gpuops.sglang.plugins.module_utils.base._identity import UnknownIdentity, identity
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import Server, ServerError

if TYPE_CHECKING:
    import argparse  # only main() parses arguments: the watcher imports it there

PACKAGE = 'ansible_collections.gpuops.sglang.plugins.module_utils'
# What the watcher imports, installed into lib/ from the collection that armed the guard: paths below PACKAGE, each
# in its layer's folder. lib/ holds no __init__.py: the bare interpreter imports its folders as namespace packages.
RUNTIME_FILES = ('domain/_guard.py', 'domain/_server.py', 'domain/_router.py', 'domain/_lease.py',
                 'readers/_processes.py', 'readers/_procfs.py', 'readers/_nvidia.py', 'readers/_sockets.py',
                 'base/_polling.py', 'base/_command.py', 'base/_http.py', 'base/_files.py', 'base/_identity.py',
                 'base/_controller.py')
ENTRY_POINT = '''# Installed by gpuops.sglang.sglang_guard: runs the guard without Ansible.
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import main
sys.exit(main(sys.argv[1:]))
'''
WATCH_INTERVAL = 0.5
# A router step of the restore may take its own timeout plus this (its requests' own timeouts): past it the
# restore goes on without the router, so that a router that hangs never keeps the previous server down.
ROUTER_SLACK_S = 15.0
# The guard folder is sglang_guard_dir/SERVICE and the watcher's unit gpuops-sglang-guard-SERVICE: a name with
# '/' or '..' would put the folder (made 0700) or the unit somewhere else.
SERVICE_NAME = re.compile(r'^[A-Za-z0-9_.@-]+$')


class GuardError(Exception):
    """The guard could not be armed, confirmed or carried out; the message says why."""


# --- the guard's files ---------------------------------------------------------

def _read_json(path: str) -> dict[str, Any] | None:
    try:
        return read_json_trusted(path)
    except UntrustedPath as exc:
        raise GuardError('%s is not safe to act on: %s; the guard did nothing' % (path, exc))
    except (ValueError, RecursionError):
        # A state file is only ever replaced by rename; an unreadable one was not written by us.
        raise GuardError('%s is not valid JSON; inspect it before running again' % path)


def _write_json(path: str, document: dict[str, Any], mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(document, indent=1, sort_keys=True).encode('utf-8'), mode)


def untrusted_message(folder: str, problem: str) -> str:
    return ('the guard folder %s is not safe for a guard that runs as root: %s. The guard writes files back and '
            'starts the server its launch configuration names from what it keeps there, so every folder from / '
            'down to it must belong to root and be writable by no one else (a sticky, world-writable folder such '
            'as /tmp is refused too); choose another sglang_guard_dir or fix the owner and mode (docs/guard.md). '
            'The guard did nothing' % (folder, problem))


def service_name_problem(name: str | None) -> str:
    """Why `name` cannot name a guard's service ("" when it can)."""
    if not isinstance(name, str) or not SERVICE_NAME.match(name) or name in ('.', '..'):
        return ('the service name %r is not a plain name (letters, digits, _ . @ -; not . or ..): the guard folder '
                'and the watcher unit are named after it' % (name,))
    return ''


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Lock(FileLock):
    """The guard folder's lock file: one actor (arm, confirm, restore) at a time, with a bounded wait."""

    def __init__(self, folder: str, timeout: float) -> None:
        super().__init__(os.path.join(folder, 'lock'), timeout, max_interval=0.5)

    def acquire(self) -> Lock:
        try:
            return super().acquire()
        except LockTimeout:
            raise GuardError('another run or the guard itself holds %s (restoring?); gave up after %ss'
                             % (self.path, self.timeout))


class MachineWindow:
    """One outage window at a time per machine (issue 44): two servers of a machine never stop, release, patch and
    start at the same time (they would race on the shared sglang install and on the GPUs).

    Its folder (the role's sglang_guard_dir, above every server's guard folder) holds window.json, naming the guard
    (folder and run) whose window is open, from its arm to its confirmation or restore; window.lock, flock'ed for
    each read and write of it. A holder counts only while its guard is armed for that run (state.json there): a run
    that died leaves its window to its watcher, whose restore (or a takeover's) ends it, and a record whose guard is
    gone is stale. Nothing but an arm ever waits for the window: a restore or a confirmation only gives it back, so
    it never waits on another server's window (no deadlock)."""

    FILE = 'window.json'
    LOCK = 'window.lock'

    def __init__(self, folder: str, timeout: float, clock: Callable = time.monotonic, sleep: Callable = time.sleep) -> None:
        self.folder = folder
        self.timeout = timeout
        self.path = os.path.join(folder, self.FILE)
        self.clock = clock
        self.sleep = sleep

    def _lock(self) -> FileLock:
        # Held for a read and a write only: a short bound, whatever lock_timeout the wait for the window has.
        return FileLock(os.path.join(self.folder, self.LOCK), 30, max_interval=0.1)

    def check(self) -> None:
        """GuardError unless the folder is one only root can change, and not a folder of the system."""
        refusal = system_folder_refusal(os.path.abspath(self.folder))
        if refusal:
            raise GuardError('the machine\'s window folder %s %s: give the folder the servers of a machine share '
                             '(sglang_guard_dir, such as /var/lib/gpuops-sglang). The guard did nothing'
                             % (self.folder, refusal))
        problem = distrust(self.folder)
        if problem:
            raise GuardError(untrusted_message(self.folder, problem))

    def holder(self) -> dict[str, Any] | None:
        return _read_json(self.path)

    @staticmethod
    def still_open(holder: dict[str, Any]) -> bool:
        """Whether the holder's guard is still armed for its run (armed, restoring, or owed a restore); a state that
        cannot be read counts as armed: an unknown window is never taken for a closed one."""
        try:
            state = read_json_trusted(os.path.join(str(holder.get('guard_folder')), 'state.json'))
        except (UntrustedPath, ValueError, RecursionError, OSError):
            return True
        return isinstance(state, dict) and state.get('run_id') == holder.get('run_id')

    def _try_take(self, holder: dict[str, Any]) -> dict[str, Any] | None:
        """None when the window is now holder's; else the holder whose window is open."""
        try:
            with self._lock():
                current = self.holder()
                if (isinstance(current, dict) and current.get('guard_folder') != holder['guard_folder']
                        and self.still_open(current)):
                    return current
                _write_json(self.path, holder)
                return None
        except LockTimeout:
            return {'guard_folder': '?', 'run_id': '?', 'service_name': 'unknown (%s stays locked)'
                    % os.path.join(self.folder, self.LOCK)}

    def take(self, holder: dict[str, Any]) -> None:
        """Open the window for holder ({guard_folder, run_id, service_name, host, since}), waiting up to timeout while
        another server's is open; GuardError naming it when it stays open."""
        if not os.path.isdir(self.folder):
            make_private_folder(self.folder)
        blocking = poll_until(lambda: self._try_take(holder), lambda found: found is None, self.timeout,
                              first_interval=0.05, max_interval=0.5, clock=self.clock, sleep=self.sleep)
        if blocking is not None:
            raise GuardError('the outage window of another server of this machine is open: %s (run %s, guard %s, host '
                             '%s); one window at a time per machine (they would race on the GPUs and the sglang '
                             'install), gave up after %ss. Let that run confirm or its guard restore, or restore it '
                             '(playbooks/rollback.yml), then run again. The guard did nothing'
                             % (blocking.get('service_name'), blocking.get('run_id'), blocking.get('guard_folder'),
                                blocking.get('host') or '?', self.timeout))

    def give_back(self, guard_folder: str, run_id: str) -> None:
        """Close the window when guard_folder's run holds it (a stale record of another run is left to the next arm)."""
        with self._lock():
            current = self.holder()
            if (isinstance(current, dict) and current.get('guard_folder') == guard_folder
                    and current.get('run_id') == run_id):
                os.unlink(self.path)


# --- the guard ------------------------------------------------------------------

class Guard:
    def __init__(self, folder: str, runner: Any = subprocess_runner, lock_timeout: float = 60.0,
                 clock: HostClock = HOST_CLOCK) -> None:
        self.folder = folder
        self.runner = runner
        self.lock_timeout = lock_timeout
        # Its bounds on the boot clock (_lease.HostClock): the arm's readings, the watcher's and the restore's check.
        self.clock = clock
        self.state_path = os.path.join(folder, 'state.json')
        self.fired_path = os.path.join(folder, 'fired.json')
        # A restore that took the server out of its router and could not put it back says so here, for the next
        # run (sglang_server_info, then the decision): it puts the server back once verified, instead of taking
        # it for one an operator drained. A readmission (the run's confirm, a later restore's) removes it.
        self.router_owed_path = os.path.join(folder, 'router_owed.json')
        self.lib = os.path.join(folder, 'lib')
        self.entry_point = os.path.join(self.lib, 'gpuops_sglang_guard.py')
        self.commands = []

    def _run(self, argv: list[str], timeout: int = 60) -> tuple[int, str, str]:
        self.commands.append(list(argv))
        return self.runner(argv, timeout)

    def check_folder(self) -> None:
        """GuardError unless the folder (and every folder above it) is one only root can change, and not a folder
        of the system (made 0700, it would lock out whatever else reads it)."""
        refusal = system_folder_refusal(os.path.abspath(self.folder))
        if refusal:
            raise GuardError('the guard folder %s %s: the guard keeps its files in a folder of its own, which it makes '
                             '(or tightens to) mode 0700; use a dedicated subfolder such as /var/lib/gpuops-sglang/SERVICE '
                             '(sglang_guard_dir). The guard did nothing' % (self.folder, refusal))
        problem = distrust(self.folder)
        if problem:
            raise GuardError(untrusted_message(self.folder, problem))

    def make_folder(self) -> None:
        """The folder, made (or tightened to) 0700 after the trust check, before anything is written in it."""
        self.check_folder()
        try:
            make_private_folder(self.folder)
        except UntrustedPath as exc:
            raise GuardError(untrusted_message(self.folder, exc))

    def state(self) -> dict[str, Any] | None:
        self.check_folder()
        return _read_json(self.state_path)

    def last_fired(self) -> dict[str, Any] | None:
        self.check_folder()
        return _read_json(self.fired_path)

    def router_owed(self) -> dict[str, Any] | None:
        """The router a restore left the server out of: {router_url, worker_url, run_id, at, why}, or None."""
        self.check_folder()
        return _read_json(self.router_owed_path)

    def _settle_router(self, state: dict[str, Any], readmitted: bool | None,
                       report: dict[str, Any] | None = None) -> None:
        """Record or clear the readmission owed: readmitted False (a restore that could not put the server back)
        records it, True clears it, None (no router step) leaves it as it is."""
        router = (state.get('settings') or {}).get('router')
        if not router or readmitted is None:
            return
        if readmitted:
            try:
                os.unlink(self.router_owed_path)
            except FileNotFoundError:
                pass
            return
        _write_json(self.router_owed_path, {
            'router_url': router.get('url'), 'worker_url': router.get('worker_url'),
            'run_id': (report or {}).get('run_id'), 'at': (report or {}).get('finished_at'),
            'why': (report or {}).get('router_problem')})

    def lease(self) -> dict[str, Any]:
        """The armed guard's lease as the query reports it (armed_at, renewed_at/by, idle, expires_at,
        deadline_at, acts_at, acts_in, the boot-clock readings); None when no guard is armed."""
        return describe(self.state(), read_lease(self.folder), now=self.clock.now())

    @staticmethod
    def unit_name(service_name: str) -> str:
        return 'gpuops-sglang-guard-%s' % service_name

    # --- arm ---------------------------------------------------------------

    def install_runtime(self, read_source: Callable) -> bool:
        """Write the watcher's code into lib/ (read_source(path below PACKAGE) -> bytes); True when anything changed.

        The guard folder is made first (0700, after the trust check): lib/ inside it must never be the
        first folder made, or the guard folder would get the umask's mode.
        """
        self.make_folder()
        target = os.path.join(self.lib, *PACKAGE.split('.'))
        make_private_folder(target)
        for layer in sorted(set(os.path.dirname(name) for name in RUNTIME_FILES)):
            make_private_folder(os.path.join(target, layer))
        changed = False
        wanted = [(os.path.join(target, *name.split('/')), read_source(name)) for name in RUNTIME_FILES]
        wanted.append((self.entry_point, ENTRY_POINT.encode('utf-8')))
        for path, data in wanted:
            if _holds(path, data):
                continue
            write_atomic(path, data, 0o600)
            changed = True
        return changed

    def arm(self, run_id: str, deadline_s: int, files: list[Any], server: dict[str, Any], host: str, python: str,
            settings: dict[str, Any], systemd: bool, idle_s: int | None = None, after_s: int = 0,
            window_folder: str | None = None) -> dict[str, Any]:
        """Snapshot files, record how to restore, start the watcher. Returns the state written.

        With window_folder, the machine's window (MachineWindow) is taken first, waiting up to lock_timeout for
        another server's to close, and given back by the confirmation or the restore."""
        problem = service_name_problem(server.get('service_name')) or arm_problem(deadline_s, idle_s, after_s)
        if problem:
            raise GuardError(problem + '; the guard did nothing')
        try:
            server_uid = identity(server.get('user'), server.get('group')).uid
        except UnknownIdentity as exc:
            raise GuardError('%s: the server cannot run as it; the guard did nothing' % exc)
        self.make_folder()
        # What marks the previous server's processes, read from its launch file before the run changes it: the
        # restore ends only this server's leftovers, never a neighbour's (ServerOwnership).
        settings = dict(settings, marks=recorded_marks(server))
        window = MachineWindow(window_folder, self.lock_timeout) if window_folder else None
        if window is not None:
            window.check()
        with Lock(self.folder, self.lock_timeout):
            current = self.state()
            if current is not None:
                raise GuardError(pending_message(current))
            if window is None:
                return self._arm(run_id, deadline_s, files, server, host, python, settings, systemd, idle_s, after_s,
                                 server_uid)
            window.take({'guard_folder': os.path.abspath(self.folder), 'run_id': run_id,
                         'service_name': server.get('service_name'), 'host': host, 'since': self.clock.wall()})
            try:
                return self._arm(run_id, deadline_s, files, server, host, python, dict(settings, window=window.folder),
                                 systemd, idle_s, after_s, server_uid)
            except BaseException:
                # No guard was armed: the window it opened closes with it.
                window.give_back(os.path.abspath(self.folder), run_id)
                raise

    def _arm(self, run_id: str, deadline_s: int, files: list[Any], server: dict[str, Any], host: str, python: str,
             settings: dict[str, Any], systemd: bool, idle_s: int | None, after_s: int, server_uid: int) -> dict[str, Any]:
        """The arm under the guard's lock, once no guard is armed (and the machine's window is this run's)."""
        backups = os.path.join(self.folder, 'files')
        shutil.rmtree(backups, ignore_errors=True)
        os.makedirs(backups, 0o700)
        entries = []
        for index, path in enumerate(sorted(set(files))):
            entries.append(self._snapshot(path, os.path.join(backups, str(index))))
        now = self.clock.now()
        state = {
            # The wall-clock times are for display; the bounds count on the boot clock, in this boot (_lease).
            'run_id': run_id, 'host': host, 'armed_at': now.wall, 'deadline': now.wall + float(deadline_s),
            'boot_id': now.boot_id, 'armed_at_boot': now.boot, 'deadline_boot': now.boot + float(deadline_s),
            'idle': float(idle_s) if idle_s else None,
            'files': entries, 'server': server, 'settings': settings, 'python': python,
            'watcher': 'systemd' if systemd else 'detached', 'unit': self.unit_name(server['service_name']),
            # The user the server runs as (its User=, or the detached start's drop; root without one).
            # The restore stops leftovers of this user only.
            'server_uid': server_uid,
        }
        if state['idle']:
            # The arm is the first renewal: the lease of an earlier run must not count for this one.
            write_lease(self.folder, lease_document(run_id, 'arm the guard', now, after_s, state['idle']))
        # Written last: a crash before this line leaves no guard, only unused backups.
        _write_json(self.state_path, state)
        try:
            self._start_watcher(state, deadline_s)
        except BaseException:
            # Whatever stopped it (the runner's CommandError, a bug, an interrupt): no guard stays armed
            # without a watcher, which would leave a run believing it is covered.
            os.unlink(self.state_path)
            raise
        return state

    def _snapshot(self, path: str, backup: str) -> dict[str, Any]:
        entry = {'path': path, 'backup': backup, 'existed': False}
        try:
            info = os.lstat(path)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise GuardError('cannot read %s to keep its pre-run bytes: %s' % (path, exc))
            return entry
        entry.update(existed=True, mode=info.st_mode & 0o7777, uid=info.st_uid, gid=info.st_gid)
        if os.path.islink(path):
            entry.update(kind='symlink', target=os.readlink(path))
            return entry
        data = read_bytes(path)
        write_atomic(backup, data, 0o600)
        entry.update(kind='file', sha256=_sha256(data))
        return entry

    def _start_watcher(self, state: dict[str, Any], deadline_s: int) -> None:
        """The watcher polls the lease and the deadline (main's watch): a transient systemd service, or a
        process in its own session. A timer at the deadline could not see the lease lapse."""
        # -B: no __pycache__ beside lib/ (it would get the umask's mode, not the guard folder's 0700).
        argv = [state['python'], '-I', '-B', self.entry_point, 'watch', '--folder', self.folder,
                '--run-id', state['run_id']]
        if state['watcher'] == 'systemd':
            unit = state['unit']
            # A stale unit of an earlier guard (already restored; .timer from versions before the lease)
            # would make systemd-run refuse the name. No guard is armed now, so its watcher is leaving anyway.
            self._run(['systemctl', 'stop', unit + '.timer', unit + '.service'])
            self._run(['systemctl', 'reset-failed', unit + '.timer', unit + '.service'])
            rc, out, err = self._run(['systemd-run', '--unit=' + unit, '--property=KillMode=process',
                                      '--description=gpuops.sglang rollback guard for ' + state['server']['service_name']]
                                     + argv)
            if rc != 0:
                raise GuardError('systemd-run could not start the guard watcher (rc %s): %s'
                                 % (rc, (err or out).strip()))
            return
        try:
            # Its own session, stdin detached: it outlives this process, the ssh connection and a SIGKILL of
            # the controller's process group. Its output goes to a log opened now, in the folder found trusted:
            # what it says (a refusal included) lands in root's file even if the folder changes later.
            log = os.open(os.path.join(self.folder, 'watcher.log'),
                          os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, 'O_NOFOLLOW', 0), 0o600)
            try:
                with open(os.devnull, 'rb') as devnull:
                    # run_command waits for its child: this one must outlive the module (2.21's pylint flags it).
                    subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=log, cwd='/',  # pylint: disable=ansible-bad-function
                                     close_fds=True, start_new_session=True)
            finally:
                os.close(log)
        except OSError as exc:
            raise GuardError('could not start the guard watcher %s: %s' % (argv[0], exc))
        self.commands.append(argv)

    # --- confirm ---------------------------------------------------------------

    def confirm(self, run_id: str, before_drop: Callable | None = None) -> tuple[bool, None]:
        """The new server is verified: drop the guard. Returns (confirmed, fired_report_or_None).

        before_drop(state), when given, runs under the lock once the confirmation is certain, while the pre-run bytes
        are still kept (the revision history records them there, _revisions); it must not raise: the run is confirmed
        whatever it does."""
        self.check_folder()
        with Lock(self.folder, self.lock_timeout):
            state = self.state()
            if state is None or state.get('run_id') != run_id or state.get('restore_failed'):
                fired = self.last_fired()
                if fired is not None and fired.get('run_id') == run_id:
                    return False, fired
                raise GuardError('no guard of run %s is armed (armed: %s)'
                                 % (run_id, state.get('run_id') if state else 'none'))
            if state.get('restoring'):
                # We hold the lock, so its restorer is gone midway: the tree may be half restored.
                raise GuardError(restoring_message(state, self.folder))
            if before_drop is not None:
                before_drop(state)
            self._drop(state)
            self._close_window(state)
            # Both window flows confirm after the verified server went back into the router (router_in.yml): a
            # readmission an earlier restore owed is paid.
            try:
                self._settle_router(state, True)
            except OSError:
                pass  # the record stays: the next run readmits a server the router already lists, a no-op
            return True, None

    def _close_window(self, state: dict[str, Any], problems: list[str] | None = None) -> None:
        """Give the machine's window back (a guard armed with one); a failure only delays the next arm's take-over
        of the stale record, which it sees closed once this guard is gone."""
        folder = (state.get('settings') or {}).get('window')
        if not folder:
            return
        try:
            MachineWindow(folder, self.lock_timeout).give_back(os.path.abspath(self.folder), state.get('run_id'))
        except Exception as exc:
            if problems is not None:
                problems.append('could not give back the machine\'s window in %s: %s' % (folder, _describe(exc)))

    def _drop(self, state: dict[str, Any]) -> None:
        os.unlink(self.state_path)
        shutil.rmtree(os.path.join(self.folder, 'files'), ignore_errors=True)
        try:
            os.unlink(os.path.join(self.folder, LEASE_FILE))
        except OSError:
            pass
        if state.get('watcher') == 'systemd' and 'idle' not in state:
            # A guard armed before the lease: its watcher is a timer at the deadline.
            self._run(['systemctl', 'stop', state['unit'] + '.timer'])
        # The watcher (service or detached) sees the state gone (or another run's) and exits by itself
        # within WATCH_INTERVAL; when it restored, it is the process running this.

    # --- restore -----------------------------------------------------------------

    def restore(self, reason: str, acted_by: str, run_id: str | None = None, bound: str | None = None,
                only_if_due: bool = False) -> dict[str, Any]:
        """Put back the pre-run state and start the previous server; None when no guard is armed.

        only_if_due (the watcher): None too when neither bound has passed any more: the run renewed or confirmed
        between the watcher's check and the lock. Checked under the lock, where no renewal can land.

        Returns the report it also writes to fired.json. Every step's error is caught and reported, so a
        restore that got as far as reading the state always ends with a report and a truthful state.json:
        removed when every file was put back, kept (marked restore_failed, with the backups) when a file
        could not be, so that the next restore (playbooks/rollback.yml, a later run's takeover) finishes it.
        """
        # Before the lock: not even a lock file is made in a folder that is not safe.
        self.check_folder()
        with Lock(self.folder, self.lock_timeout):
            state = self.state()
            if state is None or (run_id is not None and state.get('run_id') != run_id):
                return None
            taken_over = state.get('restoring')
            if only_if_due and not taken_over and due(state, read_lease(self.folder), self.clock.now()) is None:
                return None
            # Before the first action: every renewal, confirm and arm refuses the mark from now on (and a
            # restore that dies midway leaves it, for the next restore to take over). Its time is for display.
            state['restoring'] = restoring_mark(acted_by, self.clock.wall())
            marked = None
            try:
                _write_json(self.state_path, state)
            except Exception as exc:  # a full disk: the lock still keeps every renewal out
                marked = 'could not mark state.json as restoring: %s' % _describe(exc)
            report = self._restore(state, reason, acted_by)
            if taken_over:
                report['problems'].insert(0, 'took over the restore begun by pid %s (%s) at %s, which did not finish'
                                          % (taken_over.get('pid'), taken_over.get('by'), taken_over.get('at')))
            if marked:
                report['problems'].insert(0, marked)
            # Which bound made the guard act: idle or deadline (the watcher), or who asked
            # (controller, takeover, on_demand).
            report['bound'] = bound or acted_by
            self._settle(state, report)
            return report

    def _settle(self, state: dict[str, Any], report: dict[str, Any]) -> None:
        """Write the report and leave state.json saying the truth: gone (every file of the state handled, none
        failed), or still owed a restore, with its backups."""
        state.pop('restoring', None)
        if report['failed_files'] or not report['files_handled']:
            state['restore_failed'] = {'at': report['finished_at'], 'by': report['acted_by'],
                                       'files': [entry['path'] for entry in report['failed_files']],
                                       'why': report['problems'][-1] if report['problems'] else None}
            try:
                _write_json(self.state_path, state)
            except Exception as exc:  # a full disk: the report (or the log) still says so
                report['problems'].append('could not mark state.json as owed a restore: %s' % _describe(exc))
        try:
            self._settle_router(state, report.get('router_readmitted'), report)
        except Exception as exc:
            report['problems'].append('could not record the router readmission owed in %s: %s'
                                      % (self.router_owed_path, _describe(exc)))
        try:
            _write_json(self.fired_path, report)
        except Exception as exc:
            report['problems'].append('could not write %s: %s' % (self.fired_path, _describe(exc)))
            # The caller (the watcher's log, the module's result) still carries the report.
        if not report['failed_files'] and report['files_handled']:
            try:
                # Removed last: a restore cut short is finished by the next one.
                self._drop(state)
            except Exception as exc:
                report['problems'].append('could not drop the guard: %s' % _describe(exc))
            else:
                self._close_window(state, report['problems'])

    def _restore(self, state: dict[str, Any], reason: str, acted_by: str) -> dict[str, Any]:
        started = time.time()
        steps = RestoreSteps()
        outcome = {'files': [], 'killed': [], 'spared': [], 'health': {'healthy': False, 'healthy_at': None},
                   'readmitted': None, 'router_problem': None}
        try:
            self._carry_out(steps, state, outcome)
        except Exception as exc:  # a malformed state or a bug: the report still says how far it got
            steps.problems.append('the restore stopped: %s' % _describe(exc))
        healthy = bool(outcome['health']['healthy'])
        failed_files = [dict(path=entry['path'], error=entry['error']) for entry in outcome['files']
                        if entry['outcome'] == 'failed']
        unhandled = _unhandled(state, outcome['files'])
        files_handled = unhandled == [] and isinstance(state.get('files'), list)
        if not files_handled:
            # Stopped before (or while) the files were written back (a state of an older collection without a
            # key, a bug): nothing says the tree is the pre-run one, so the guard stays owed, backups and all.
            failed_files.extend(dict(path=path, error='not restored: the restore stopped before it reached this file')
                                for path in unhandled)
            steps.problems.append(
                'the restore stopped before it handled every file (%s): the guard stays owed a restore and its '
                'backups stay in %s; fix the cause, then restore again (playbooks/rollback.yml)'
                % (', '.join(unhandled) or 'its file list is unreadable', os.path.join(self.folder, 'files')))
        stopped_at = _read_stop_marker((state.get('settings') or {}).get('stop_marker'))
        return {
            'run_id': state.get('run_id'), 'host': state.get('host'), 'acted_by': acted_by,
            'status': 'rolled_back' if healthy and not failed_files else 'failed',
            'healthy': healthy,
            'reason': reason,
            'restored_files': [entry['path'] for entry in outcome['files'] if entry['outcome'] in ('restored', 'removed')],
            'files': outcome['files'], 'failed_files': failed_files,
            'killed': outcome['killed'], 'spared': outcome['spared'],
            'steps': steps.done, 'problems': steps.problems, 'timings': steps.timings,
            'started_at': started, 'finished_at': time.time(), 'healthy_at': outcome['health'].get('healthy_at'),
            'downtime_s': round(outcome['health']['healthy_at'] - stopped_at, 2) if healthy and stopped_at else None,
            'router_readmitted': outcome['readmitted'],
            'router_problem': outcome['router_problem'],
            'hostname': socket.gethostname(),
            'files_handled': files_handled,
        }

    def _carry_out(self, steps: RestoreSteps, state: dict[str, Any], outcome: dict[str, Any]) -> None:
        settings = state['settings']
        server = Server.from_dict(state['server'], runner=self.runner)
        router = settings.get('router')
        taking_out = None
        if router:
            # The run may have put the new server back already (or never taken the old one out):
            # no request may be routed to a server that is about to stop. Bounded: a router that hangs
            # must not keep the restore (and the lock) past the router's own timeout.
            taking_out = BoundedStep(lambda: self._take_out(router), _router_bound(router))
            steps.run('take the server out of the router', taking_out.wait)
            drain = float(router.get('drain_timeout') or 0)
            if drain > 0 and server.serves_http:
                # A server that was readmitted (a canary baking under live traffic) holds requests the router
                # sent before the removal: they finish before the stop, as the run's own stop lets them.
                steps.run('wait for the requests in flight', lambda: server.wait_idle(drain))
        steps.run('stop the server that runs now', server.stop)
        steps.run('stop what is left of SGLang',
                  lambda: self._kill_leftovers(settings, state.get('server_uid'), outcome['killed'], server,
                                               outcome['spared']))
        self._restore_files(steps, state['files'], outcome['files'])
        failed = [entry for entry in outcome['files'] if entry['outcome'] == 'failed']
        if failed:
            steps.problems.append(
                '%d file(s) could not be restored (%s): the tree is half old, half new, so no server was started; '
                'the pre-run bytes stay in %s and the guard stays owed a restore: fix the cause, then restore '
                'again (playbooks/rollback.yml)'
                % (len(failed), ', '.join(entry['path'] for entry in failed), os.path.join(self.folder, 'files')))
            outcome['router_problem'] = 'nothing was started, so nothing was put back' if router else None
            outcome['readmitted'] = False if router else None
            return
        if server.manager == 'systemd':
            steps.run('reload systemd', lambda: self._run(['systemctl', 'daemon-reload']))
        steps.run('wait for the GPUs', lambda: self._wait_gpus(settings))
        outcome['health'] = self._start_previous(steps, state, server)
        if router:
            outcome['readmitted'], outcome['router_problem'] = self._readmit_restored(
                steps, router, server, bool(outcome['health']['healthy']), taking_out)

    @staticmethod
    def _start_previous(steps: RestoreSteps, state: dict[str, Any], server: Server) -> dict[str, Any]:
        """Start the server the restored files describe and wait for its /health; the wait's result."""
        settings = state['settings']
        previous = any(entry['existed'] for entry in state['files']
                       if entry['path'] == state['server']['launch_file'])
        health = {'healthy': False, 'healthy_at': None, 'why': None}
        if not previous:
            steps.problems.append('there was no previous server to start (no launch configuration before the run)')
            return health
        launched = steps.run('start the previous server', lambda: server.start(daemon_reload=False))
        if launched is not None:
            waited = steps.run('wait for health', lambda: server.wait_healthy(
                float(settings.get('health_timeout', 900)), float(settings.get('health_interval', 0.25)),
                died=launched[1]))
            health = waited or health
            steps.timings['wait for health'] = round(time.time() - (launched[0]['started_at']), 3)
            if waited is not None and not health['healthy']:
                steps.problems.append('the previous server is not healthy: %s' % health['why'])
        return health

    def _readmit_restored(self, steps: RestoreSteps, router: dict[str, Any], server: Server, healthy: bool,
                          taking_out: BoundedStep) -> tuple[bool, str | None]:
        """(put back into the router, why not)."""
        name = 'put the server back into the router'
        if not healthy:
            return False, 'the restored server is not healthy, so it was not put back'
        if taking_out is not None and taking_out.running():
            # Its DELETE may still land after an admission: the router would end up without the server.
            return False, ('the router did not finish taking the server out (it hangs?), so it was not put back; '
                           'admit it by hand once the router answers')
        readmitted = steps.run(name, BoundedStep(lambda: self._readmit(router, server.api_key()),
                                                 _router_bound(router)).wait)
        if readmitted:
            return True, None
        return False, steps.failed.get(name) or 'the router did not admit it'

    @staticmethod
    def _router(router_settings: dict[str, Any]) -> Router:
        return Router(router_settings['url'], api_key=router_settings.get('api_key'))

    def _take_out(self, router_settings: dict[str, Any]) -> bool:
        return self._router(router_settings).take_out(router_settings['worker_url'],
                                                      float(router_settings.get('timeout') or 30))

    def _readmit(self, router_settings: dict[str, Any], worker_api_key: str | None = None) -> dict[str, Any]:
        return self._router(router_settings).admit(router_settings['worker_url'],
                                                   float(router_settings.get('timeout') or 30),
                                                   worker_api_key=worker_api_key)

    def _kill_leftovers(self, settings: dict[str, Any], server_uid: int, killed: list[Any], server: Server | None = None,
                        spared: list[Any] | None = None) -> list[Any]:
        """SGLang's leftovers: processes of the server's user whose command line matches the kill patterns
        (the role anchors them to SGLang's own command lines) and that are this server's, not a neighbour's
        (ServerOwnership: the marks recorded at the arm and the server's now). Each one signalled lands in killed,
        each neighbour's in spared."""
        local = LocalProcesses()
        patterns = compile_patterns(settings.get('kill_patterns') or [])
        if not patterns:
            return []
        uid = os.geteuid() if server_uid is None else int(server_uid)
        ownership = ServerOwnership(_own_marks(settings.get('marks'), server),
                                    [ServerMarks.from_option(neighbour) for neighbour in settings.get('neighbours') or []
                                     if isinstance(neighbour, dict)])
        listing = local.list(with_marks=ownership.judges)
        # Another user's process is never the server's, whatever its command line says.
        matches = [record for record in select(listing, patterns, protected_pids())
                   if process_uids(record.pid, local.proc_root) == (uid, uid)]
        targets, others = ownership.sort(matches, listing)
        if spared is not None:
            spared.extend(others)
        outcome = terminate(local, targets, float(settings.get('term_timeout', 30)))
        killed.extend(dict(entry, user=user_named(uid)) for entry in outcome.killed)
        if outcome.remaining:
            raise GuardError('survived SIGKILL: %s' % ', '.join(str(r.pid) for r in outcome.remaining))
        return killed

    @staticmethod
    def _restore_files(steps: RestoreSteps, entries: list[dict[str, Any]],
                       outcomes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Each file on its own (one that cannot be written never keeps the others from being restored):
        [{path, outcome (restored, removed, unchanged, failed), error}], appended to outcomes as each is handled
        (what a restore cut short did is known)."""
        outcomes = [] if outcomes is None else outcomes
        begun = time.time()
        for entry in entries:
            path = entry.get('path')
            try:
                result = _restore_entry(entry)
                outcomes.append({'path': path, 'outcome': result, 'error': None})
            except Exception as exc:
                outcomes.append({'path': path, 'outcome': 'failed', 'error': _describe(exc)})
        steps.timings['restore the pre-run files'] = round(time.time() - begun, 3)
        if all(entry['outcome'] != 'failed' for entry in outcomes):
            steps.done.append('restore the pre-run files')
        else:
            steps.failed['restore the pre-run files'] = '; '.join(
                '%s: %s' % (entry['path'], entry['error']) for entry in outcomes if entry['outcome'] == 'failed')
        return outcomes

    @staticmethod
    def _gpu_scope(reader: GpuReader, settings: dict[str, Any]) -> list[int] | None:
        """The indices of the server's own GPUs (settings' gpus: indices or UUIDs), None for every GPU: the restore
        waits for these only, never for a neighbour's on the same machine."""
        wanted = {str(entry) for entry in settings.get('gpus') or []}
        if not wanted:
            return None
        try:
            found = reader.gpus()
        except (CommandError, NvidiaSmiError) as exc:
            raise GuardError('nvidia-smi failed: %s' % exc) from None
        scope = [gpu['index'] for gpu in found if gpu['index'] is not None
                 and (str(gpu['index']) in wanted or gpu.get('uuid') in wanted)]
        if len(scope) < len(wanted):
            raise GuardError('GPU(s) %s of this server not listed by nvidia-smi' % ', '.join(
                sorted(wanted - {str(index) for index in scope} - {gpu.get('uuid') for gpu in found})))
        return scope

    def _wait_gpus(self, settings: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The one "memory is free" proof (_nvidia), missing GPUs included; GuardError naming what is not."""
        nvidia_smi = settings.get('nvidia_smi')
        if not nvidia_smi:
            return None
        reader = GpuReader(CommandRunner.over(self._run, 30), nvidia_smi)
        proof = FreeMemoryProof(reader, int(settings.get('max_used_mib', 0)), scope=self._gpu_scope(reader, settings))
        gpus = proof.wait(float(settings.get('gpu_timeout', 60)), max_interval=0.5)
        if proof.free():
            return gpus
        if proof.timed_out is not None or not gpus:
            raise GuardError('nvidia-smi failed: %s' % (proof.timed_out or proof.last_error))
        problems = []
        busy = gpus_over(proof.covered(gpus), proof.max_used_mib)
        if busy:
            problems.append('GPU memory still in use: %s' % ', '.join(
                'GPU %s unreadable (%s)' % ('?' if gpu['index'] is None else gpu['index'], gpu['error']) if gpu['error'] is not None
                else 'GPU %s %s MiB' % (gpu['index'], gpu['memory_used_mib']) for gpu in busy))
        if proof.missing():
            problems.append('GPU(s) %s not listed by nvidia-smi any more (they were at the first reading)'
                            % ', '.join(str(index) for index in proof.missing()))
        raise GuardError('; '.join(problems))


def _unhandled(state: dict[str, Any], outcomes: list[Any]) -> list[Any]:
    """The paths of the state's files the restore did not handle (all of them when it never reached the files)."""
    entries = state.get('files')
    if not isinstance(entries, list):
        return []
    handled = len(outcomes)
    return [entry.get('path') if isinstance(entry, dict) else repr(entry) for entry in entries[handled:]]


def pending_message(state: dict[str, Any]) -> str:
    """Why a guard cannot be armed over this one."""
    if state.get('restoring'):
        return restoring_message(state, 'its folder')
    failed = state.get('restore_failed')
    if failed:
        return ('the guard armed by run %s restored and could not write back %s (see fired.json); fix the cause, '
                'then restore it (state=restored, playbooks/rollback.yml)'
                % (state.get('run_id'), ', '.join(failed.get('files') or []) or 'every file'))
    return 'a guard armed by run %s is still pending on this host; restore it first (state=restored)' % state.get('run_id')


def _describe(exc: Exception) -> str:
    text = str(exc)
    return '%s: %s' % (type(exc).__name__, text) if text else type(exc).__name__


def _router_bound(router_settings: dict[str, Any]) -> float:
    return float(router_settings.get('timeout') or 30) + ROUTER_SLACK_S


class BoundedStep(BoundedCall):
    """The router's steps, each a BoundedCall: a router that trickles its answer or never answers costs the
    restore `bound`, then the restore goes on without it."""

    def __init__(self, action: Callable, bound: float) -> None:
        super().__init__(action, bound, 'gpuops-sglang-guard-router')

    def timeout_error(self) -> GuardError:
        return GuardError('no outcome within %gs (the router hangs or trickles its answer); went on without it'
                          % self.bound)


class RestoreSteps:
    """The restore's steps: each one timed, a failure noted and the next step run anyway."""

    def __init__(self) -> None:
        self.done, self.problems = [], []
        self.timings, self.failed = {}, {}

    def run(self, name: str, action: Callable) -> str | None:
        """action()'s outcome; None when it raised (then named in problems and failed).

        Any Exception: a hostile router's answer (RecursionError in the JSON parser), a full disk, a bug; one
        step failing must never keep the next ones (the previous server's start) from running.
        """
        begun = time.time()
        try:
            outcome = action()
            self.done.append(name)
            return outcome
        except Exception as exc:
            self.problems.append('%s: %s' % (name, _describe(exc) if not isinstance(exc, self.EXPECTED) else exc))
            self.failed[name] = str(exc) or type(exc).__name__
            return None
        finally:
            self.timings[name] = round(time.time() - begun, 3)

    # Errors whose message says it all; others are named by their type too.
    EXPECTED = (ServerError, GuardError, NvidiaSmiError, CommandError, RouterError, OSError)


def recorded_marks(server: dict[str, Any]) -> dict[str, Any] | None:
    """The marks of the server as the arm reads them ({service_name, ports, launch_file}); None where the server's
    record is incomplete (the restore then reads them from the server alone)."""
    try:
        marks = Server.from_dict(server).marks()
    except (KeyError, TypeError, ValueError):
        return None
    return {'service_name': marks.service_name, 'ports': list(marks.ports), 'launch_file': marks.launch_file}


def _own_marks(recorded: dict[str, Any] | None, server: Server | None) -> ServerMarks | None:
    """The marks recorded at the arm (the previous server's port) joined with the server's now (the run's port)."""
    now = server.marks() if server is not None else ServerMarks()
    before = ServerMarks.from_option(recorded) if isinstance(recorded, dict) else ServerMarks()
    if not now.known and not before.known:
        return None
    return ServerMarks(now.service_name or before.service_name, tuple(sorted(set(now.ports) | set(before.ports))),
                       now.launch_file or before.launch_file)


def process_uids(pid: int, proc_root: str = '/proc') -> tuple[int, int] | None:
    """(real, effective) uid of a process from /proc/PID/status; None when it is gone."""
    try:
        with open(os.path.join(proc_root, str(pid), 'status')) as handle:
            for line in handle:
                if line.startswith('Uid:'):
                    fields = line.split()
                    return int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _holds(path: str, data: bytes) -> bool:
    """Whether path is already a private file of ours holding data (a file left by anyone else is replaced)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
    except OSError:
        return False
    with os.fdopen(fd, 'rb') as handle:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & 0o7777 != 0o600 or info.st_nlink != 1:
            return False
        return handle.read() == data


def _restore_entry(entry: dict[str, Any]) -> str:
    """Put one file back as it was before the run: 'restored', 'removed' or 'unchanged'; raises when it cannot."""
    path = entry['path']
    if not entry['existed']:
        if os.path.lexists(path):
            os.unlink(path)
            return 'removed'
        return 'unchanged'
    if entry['kind'] == 'symlink':
        if os.path.islink(path) and os.readlink(path) == entry['target']:
            return 'unchanged'
        tmp = '%s.gpuops-restore.%d' % (path, os.getpid())
        os.symlink(entry['target'], tmp)
        try:
            os.rename(tmp, path)
        except OSError:
            os.unlink(tmp)
            raise
        return 'restored'
    return 'restored' if _restore_file(entry) else 'unchanged'


def _restore_file(entry: dict[str, Any]) -> bool:
    """Put a regular file's pre-run bytes, mode and owner back; False when they are all there already.

    A state armed by an older collection may lack the mode or the owner: then the live file's are kept.
    """
    path = entry['path']
    data = read_bytes(entry['backup'])
    if _sha256(data) != entry['sha256']:
        raise GuardError('the backup of %s is damaged (sha256 differs); left it as it is' % path)
    mode = entry.get('mode')
    # Only root can give a file away: an unprivileged restore compares (and writes) the mode alone.
    owner = (entry['uid'], entry['gid']) if entry.get('uid') is not None and entry.get('gid') is not None else None
    owner = owner if os.geteuid() == 0 else None
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        try:
            same_bytes = read_bytes(path) == data
        except OSError:
            same_bytes = False
        if (same_bytes and (mode is None or stat.S_IMODE(info.st_mode) == mode)
                and (owner is None or (info.st_uid, info.st_gid) == owner)):
            return False
        if mode is None:
            mode = stat.S_IMODE(info.st_mode)
    write_atomic(path, data, 0o644 if mode is None else mode, '.gpuops-restore', owner)
    return True


def _read_stop_marker(path: str | None) -> float | None:
    if not path:
        return None
    try:
        with open(path) as handle:
            return float(handle.read().strip())
    except (OSError, ValueError):
        return None


# --- the watcher's command line ----------------------------------------------------

def watch(guard: Guard, run_id: str, clock: HostClock = HOST_CLOCK, sleep: Callable = time.sleep,
          known: dict[str, Any] | None = None) -> str | None:
    """Poll the guard until its run confirms (None) or a bound passes ('idle' or 'deadline'), on clock's boot
    clock (_lease.HostClock): a wall clock stepped either way moves no bound.

    Every poll reads the state through the trust check: GuardError once the folder (or one above it) is
    not root's alone any more, or the state is not the guard's; the watcher then acts on nothing.
    Only a state.json that is not there means confirmed: one that cannot be read now (EIO, EMFILE...) is read
    again on the next poll, until the guard's deadline (of the last state read, kept in `known` across calls),
    then GuardError.
    """
    known = {} if known is None else known
    while True:
        try:
            state = guard.state()
        except OSError as exc:
            if known.get('state') is not None and deadline_passed(known['state'], clock.now()):
                raise GuardError('could not read %s up to the deadline: %s' % (guard.state_path, _describe(exc)))
            sleep(WATCH_INTERVAL)
            continue
        if state is None or state.get('run_id') != run_id or state.get('restore_failed'):
            return None
        known['state'] = state
        bound = due(state, read_lease(guard.folder), clock.now())
        if bound is not None:
            return bound
        sleep(WATCH_INTERVAL)


REASONS = {
    'idle': 'nothing of the run renewed the guard for its idle bound (%ss): the controller is gone',
    'deadline': 'the run did not confirm the new server within its deadline (%ss after arming)',
}
REBOOTED = ('the host restarted since the guard was armed (boot %s, now %s): every step of the run died with it, '
            'so its lease lapsed')


def say(message: str) -> None:
    """What the watcher reports outside the guard folder: its output (the journal, or watcher.log opened at the
    arm) and syslog. A folder it cannot trust any more is never written to."""
    try:
        sys.stderr.write(message + '\n')
        sys.stderr.flush()
    except Exception:  # nothing left to tell
        pass
    try:
        import syslog
        syslog.openlog('gpuops-sglang-guard', 0, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_ERR, message)
    except Exception:
        pass


def _reason(guard: Guard, args: argparse.Namespace, bound: str) -> str:
    state = guard.state() or {}
    now = guard.clock.now()
    if not args.reason and armed_in_another_boot(state, now):
        return REBOOTED % (state.get('boot_id'), now.boot_id)
    # Both wall-clock times were written from one reading at the arm: their difference is the deadline's duration.
    seconds = state.get('idle') if bound == 'idle' else float(state.get('deadline', 0)) - float(state.get('armed_at', 0))
    # Rounded: a difference of two large floats may fall a hair below the whole seconds it stands for.
    return args.reason or REASONS[bound] % int(round(seconds or 0))


def _fire(guard: Guard, args: argparse.Namespace) -> dict[str, Any]:
    return guard.restore(_reason(guard, args, 'deadline'), 'deadline', run_id=args.run_id, bound='deadline')


def _watch_and_restore(guard: Guard, args: argparse.Namespace, sleep: Callable = time.sleep) -> dict[str, Any] | None:
    """Watch, then restore when a bound passed; back to watching when, under the lock, it had not any more (the
    run renewed or confirmed meanwhile) or the state could not be read there (read again on the next poll)."""
    known = {}
    while True:
        bound = watch(guard, args.run_id, clock=guard.clock, sleep=sleep, known=known)
        if bound is None:
            return None
        try:
            report = guard.restore(_reason(guard, args, bound), bound, run_id=args.run_id, bound=bound,
                                   only_if_due=True)
        except OSError as exc:
            say('gpuops.sglang guard of run %s in %s: could not read the guard before restoring (will try again): %s'
                % (args.run_id, args.folder, _describe(exc)))
            sleep(WATCH_INTERVAL)
            continue
        if report is not None:
            return report


def main(argv: list[str]) -> int:
    """``watch``: wait for the lease to lapse or the deadline (exit when confirmed), then restore.
    ``fire``: restore now (the deadline's timer of guards armed before the lease).

    Exit status: 0 the run confirmed or the previous server serves; 1 the restore failed (fired.json says why);
    2 the guard refused to act (its folder is not safe, its state unreadable) or could not get the lock.
    """
    import argparse
    parser = argparse.ArgumentParser(prog='gpuops_sglang_guard')
    parser.add_argument('command', choices=['watch', 'fire'])
    parser.add_argument('--folder', required=True)
    parser.add_argument('--run-id', required=True)
    parser.add_argument('--reason', default=None)
    args = parser.parse_args(argv)
    guard = Guard(args.folder, lock_timeout=3600)
    try:
        report = _watch_and_restore(guard, args) if args.command == 'watch' else _fire(guard, args)
    except GuardError as exc:
        say('gpuops.sglang guard of run %s in %s: refused to act: %s' % (args.run_id, args.folder, exc))
        return 2
    except Exception as exc:  # before the restore's own report: say it where it can be read
        say('gpuops.sglang guard of run %s in %s: stopped before restoring: %s'
            % (args.run_id, args.folder, _describe(exc)))
        return 2
    if report is None:
        return 0
    say(json.dumps(report, sort_keys=True))
    return 0 if report['status'] == 'rolled_back' else 1
