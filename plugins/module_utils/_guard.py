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

Pure standard library plus this collection's own module_utils (installed into lib/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from ansible_collections.gpuops.sglang.plugins.module_utils._command import CommandError, CommandRunner, subprocess_runner
from ansible_collections.gpuops.sglang.plugins.module_utils._lease import (
    LEASE_FILE,
    describe,
    due,
    lease_document,
    read_lease,
    write_lease,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._files import (
    FileLock,
    LockTimeout,
    read_bytes,
    read_json,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._nvidia import (
    FreeMemoryProof,
    GpuReader,
    NvidiaSmiError,
    gpus_over,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import (
    compile_patterns,
    select,
    terminate,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._procfs import LocalProcesses, protected_pids
from ansible_collections.gpuops.sglang.plugins.module_utils._router import Router, RouterError
from ansible_collections.gpuops.sglang.plugins.module_utils._server import Server, ServerError

PACKAGE = 'ansible_collections.gpuops.sglang.plugins.module_utils'
# What the watcher imports, installed into lib/ from the collection that armed the guard.
RUNTIME_FILES = ('_guard.py', '_server.py', '_processes.py', '_procfs.py', '_polling.py', '_nvidia.py', '_router.py',
                 '_command.py', '_http.py', '_files.py', '_lease.py')
ENTRY_POINT = '''# Installed by gpuops.sglang.sglang_guard: runs the guard without Ansible.
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ansible_collections.gpuops.sglang.plugins.module_utils._guard import main
sys.exit(main(sys.argv[1:]))
'''
WATCH_INTERVAL = 0.5


class GuardError(Exception):
    """The guard could not be armed, confirmed or carried out; the message says why."""


# --- the guard's files ---------------------------------------------------------

def _read_json(path):
    try:
        return read_json(path)
    except ValueError:
        # A state file is only ever replaced by rename; an unreadable one was not written by us.
        raise GuardError('%s is not valid JSON; inspect it before running again' % path)


def _write_json(path, document, mode=0o600):
    write_atomic(path, json.dumps(document, indent=1, sort_keys=True).encode('utf-8'), mode)


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


class Lock(FileLock):
    """The guard folder's lock file: one actor (arm, confirm, restore) at a time, with a bounded wait."""

    def __init__(self, folder, timeout):
        super(Lock, self).__init__(os.path.join(folder, 'lock'), timeout, max_interval=0.5)

    def acquire(self):
        try:
            return super(Lock, self).acquire()
        except LockTimeout:
            raise GuardError('another run or the guard itself holds %s (restoring?); gave up after %ss'
                             % (self.path, self.timeout))


# --- the guard ------------------------------------------------------------------

class Guard(object):
    def __init__(self, folder, runner=subprocess_runner, lock_timeout=60.0):
        self.folder = folder
        self.runner = runner
        self.lock_timeout = lock_timeout
        self.state_path = os.path.join(folder, 'state.json')
        self.fired_path = os.path.join(folder, 'fired.json')
        self.lib = os.path.join(folder, 'lib')
        self.entry_point = os.path.join(self.lib, 'gpuops_sglang_guard.py')
        self.commands = []

    def _run(self, argv, timeout=60):
        self.commands.append(list(argv))
        return self.runner(argv, timeout)

    def state(self):
        return _read_json(self.state_path)

    def last_fired(self):
        return _read_json(self.fired_path)

    def lease(self):
        """The armed guard's lease as the query reports it (armed_at, renewed_at/by, idle, expires_at,
        deadline_at, acts_at); None when no guard is armed."""
        return describe(self.state(), read_lease(self.folder))

    @staticmethod
    def unit_name(service_name):
        return 'gpuops-sglang-guard-%s' % service_name

    # --- arm ---------------------------------------------------------------

    def install_runtime(self, read_source):
        """Write the watcher's code into lib/ (read_source(name) -> bytes); True when anything changed."""
        target = os.path.join(self.lib, *PACKAGE.split('.'))
        if not os.path.isdir(target):
            os.makedirs(target, 0o700)
        changed = False
        wanted = [(os.path.join(target, name), read_source(name)) for name in RUNTIME_FILES]
        wanted.append((self.entry_point, ENTRY_POINT.encode('utf-8')))
        for path, data in wanted:
            try:
                with open(path, 'rb') as handle:
                    if handle.read() == data:
                        continue
            except (IOError, OSError):
                pass
            write_atomic(path, data, 0o600)
            changed = True
        return changed

    def arm(self, run_id, deadline_s, files, server, host, python, settings, systemd, idle_s=None, after_s=0):
        """Snapshot files, record how to restore, start the watcher. Returns the state written."""
        if not os.path.isdir(self.folder):
            os.makedirs(self.folder, 0o700)
        with Lock(self.folder, self.lock_timeout):
            current = self.state()
            if current is not None:
                raise GuardError('a guard armed by run %s is still pending; restore it first (state=restored)'
                                 % current.get('run_id'))
            backups = os.path.join(self.folder, 'files')
            shutil.rmtree(backups, ignore_errors=True)
            os.makedirs(backups, 0o700)
            entries = []
            for index, path in enumerate(sorted(set(files))):
                entries.append(self._snapshot(path, os.path.join(backups, str(index))))
            now = time.time()
            state = {
                'run_id': run_id, 'host': host, 'armed_at': now, 'deadline': now + float(deadline_s),
                'idle': float(idle_s) if idle_s else None,
                'files': entries, 'server': server, 'settings': settings, 'python': python,
                'watcher': 'systemd' if systemd else 'detached', 'unit': self.unit_name(server['service_name']),
            }
            if state['idle']:
                # The arm is the first renewal: the lease of an earlier run must not count for this one.
                write_lease(self.folder, lease_document(run_id, 'arm the guard', now, after_s, state['idle']))
            # Written last: a crash before this line leaves no guard, only unused backups.
            _write_json(self.state_path, state)
            try:
                self._start_watcher(state, deadline_s)
            except GuardError:
                os.unlink(self.state_path)
                raise
            return state

    def _snapshot(self, path, backup):
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

    def _start_watcher(self, state, deadline_s):
        """The watcher polls the lease and the deadline (main's watch): a transient systemd service, or a
        process in its own session. A timer at the deadline could not see the lease lapse."""
        argv = [state['python'], '-I', self.entry_point, 'watch', '--folder', self.folder,
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
            # Its own session, stdio detached: it outlives this process, the ssh connection
            # and a SIGKILL of the controller's process group.
            with open(os.devnull, 'r+b') as devnull:
                # run_command waits for its child: this one must outlive the module (2.21's pylint flags it).
                subprocess.Popen(argv, stdin=devnull, stdout=devnull, stderr=devnull, cwd='/',  # pylint: disable=ansible-bad-function
                                 close_fds=True, start_new_session=True)
        except OSError as exc:
            raise GuardError('could not start the guard watcher %s: %s' % (argv[0], exc))
        self.commands.append(argv)

    # --- confirm ---------------------------------------------------------------

    def confirm(self, run_id):
        """The new server is verified: drop the guard. Returns (confirmed, fired_report_or_None)."""
        with Lock(self.folder, self.lock_timeout):
            state = self.state()
            if state is None or state.get('run_id') != run_id:
                fired = self.last_fired()
                if fired is not None and fired.get('run_id') == run_id:
                    return False, fired
                raise GuardError('no guard of run %s is armed (armed: %s)'
                                 % (run_id, state.get('run_id') if state else 'none'))
            self._drop(state)
            return True, None

    def _drop(self, state):
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

    def restore(self, reason, acted_by, run_id=None, bound=None):
        """Put back the pre-run state and start the previous server; None when no guard is armed.

        Returns the report it also writes to fired.json.
        """
        with Lock(self.folder, self.lock_timeout):
            state = self.state()
            if state is None or (run_id is not None and state.get('run_id') != run_id):
                return None
            report = self._restore(state, reason, acted_by)
            # Which bound made the guard act: idle or deadline (the watcher), or who asked
            # (controller, takeover, on_demand).
            report['bound'] = bound or acted_by
            _write_json(self.fired_path, report, 0o644)
            # Removed last: a restore cut short is finished by the next one.
            self._drop(state)
            return report

    def _restore(self, state, reason, acted_by):
        started = time.time()
        settings = state['settings']
        server = Server.from_dict(state['server'], runner=self.runner)
        steps = RestoreSteps()
        restored = self._put_back(steps, state, server)
        health = self._start_previous(steps, state, server)
        healthy = bool(health['healthy'])
        readmitted, router_problem = self._readmit_restored(steps, settings, server, healthy)
        stopped_at = _read_stop_marker(settings.get('stop_marker'))
        return {
            'run_id': state['run_id'], 'host': state['host'], 'acted_by': acted_by,
            'status': 'rolled_back' if healthy else 'failed',
            'healthy': healthy,
            'reason': reason,
            'restored_files': restored or [],
            'steps': steps.done, 'problems': steps.problems, 'timings': steps.timings,
            'started_at': started, 'finished_at': time.time(), 'healthy_at': health.get('healthy_at'),
            'downtime_s': round(health['healthy_at'] - stopped_at, 2) if healthy and stopped_at else None,
            'router_readmitted': readmitted,
            'router_problem': router_problem,
            'hostname': socket.gethostname(),
        }

    def _put_back(self, steps, state, server):
        """Everything of the run out of the way, the pre-run files back; returns the files restored."""
        settings = state['settings']
        if settings.get('router'):
            # The run may have put the new server back already (or never taken the old one out):
            # no request may be routed to a server that is about to stop.
            steps.run('take the server out of the router', lambda: self._take_out(settings['router']))
        steps.run('stop the server that runs now', server.stop)
        steps.run('stop what is left of SGLang', lambda: self._kill_leftovers(settings))
        restored = steps.run('restore the pre-run files', lambda: self._restore_files(state['files']))
        if server.manager == 'systemd':
            steps.run('reload systemd', lambda: self._run(['systemctl', 'daemon-reload']))
        steps.run('wait for the GPUs', lambda: self._wait_gpus(settings))
        return restored

    @staticmethod
    def _start_previous(steps, state, server):
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
            health = server.wait_healthy(float(settings.get('health_timeout', 900)),
                                         float(settings.get('health_interval', 0.25)), died=launched[1])
            steps.timings['wait for health'] = round(time.time() - (launched[0]['started_at']), 3)
            if not health['healthy']:
                steps.problems.append('the previous server is not healthy: %s' % health['why'])
        return health

    def _readmit_restored(self, steps, settings, server, healthy):
        """(put back into the router, why not); (None, None) without a router."""
        if not settings.get('router'):
            return None, None
        name = 'put the server back into the router'
        # The previous server's key is in the restored launch configuration (it may differ from the run's).
        readmitted = bool(healthy and steps.run(name, lambda: self._readmit(settings['router'], server.api_key())))
        if readmitted:
            return True, None
        return False, steps.failed.get(name) or 'the restored server is not healthy, so it was not put back'

    @staticmethod
    def _router(router_settings):
        return Router(router_settings['url'], api_key=router_settings.get('api_key'))

    def _take_out(self, router_settings):
        return self._router(router_settings).take_out(router_settings['worker_url'],
                                                      float(router_settings.get('timeout') or 30))

    def _readmit(self, router_settings, worker_api_key=None):
        return self._router(router_settings).admit(router_settings['worker_url'],
                                                   float(router_settings.get('timeout') or 30),
                                                   worker_api_key=worker_api_key)

    def _kill_leftovers(self, settings):
        local = LocalProcesses()
        patterns = compile_patterns(settings.get('kill_patterns') or [])
        if not patterns:
            return []
        targets = select(local.list(), patterns, protected_pids())
        outcome = terminate(local, targets, float(settings.get('term_timeout', 30)))
        if outcome.remaining:
            raise GuardError('survived SIGKILL: %s' % ', '.join(str(r.pid) for r in outcome.remaining))
        return outcome.killed

    def _restore_files(self, entries):
        restored = []
        for entry in entries:
            path = entry['path']
            if not entry['existed']:
                if os.path.lexists(path):
                    os.unlink(path)
                    restored.append(path)
                continue
            if entry['kind'] == 'symlink':
                if os.path.islink(path) and os.readlink(path) == entry['target']:
                    continue
                tmp = '%s.gpuops-restore.%d' % (path, os.getpid())
                os.symlink(entry['target'], tmp)
                os.rename(tmp, path)
            elif not _restore_file(entry):
                continue
            restored.append(path)
        return restored

    def _wait_gpus(self, settings):
        """The one "memory is free" proof (_nvidia), missing GPUs included; GuardError naming what is not."""
        nvidia_smi = settings.get('nvidia_smi')
        if not nvidia_smi:
            return None
        reader = GpuReader(CommandRunner.over(self._run, 30), nvidia_smi)
        proof = FreeMemoryProof(reader, int(settings.get('max_used_mib', 0)))
        gpus = proof.wait(float(settings.get('gpu_timeout', 60)), max_interval=0.5)
        if proof.free():
            return gpus
        if proof.timed_out is not None or not gpus:
            raise GuardError('nvidia-smi failed: %s' % (proof.timed_out or proof.last_error))
        problems = []
        busy = gpus_over(gpus, proof.max_used_mib)
        if busy:
            problems.append('GPU memory still in use: %s' % ', '.join(
                'GPU %s unreadable (%s)' % ('?' if gpu['index'] is None else gpu['index'], gpu['error']) if gpu['error'] is not None
                else 'GPU %s %s MiB' % (gpu['index'], gpu['memory_used_mib']) for gpu in busy))
        if proof.missing():
            problems.append('GPU(s) %s not listed by nvidia-smi any more (they were at the first reading)'
                            % ', '.join(str(index) for index in proof.missing()))
        raise GuardError('; '.join(problems))


class RestoreSteps(object):
    """The restore's steps: each one timed, a failure noted and the next step run anyway."""

    ERRORS = (ServerError, GuardError, NvidiaSmiError, CommandError, RouterError, OSError, ValueError)

    def __init__(self):
        self.done, self.problems = [], []
        self.timings, self.failed = {}, {}

    def run(self, name, action):
        """action()'s outcome; None when it raised one of ERRORS (then named in problems and failed)."""
        begun = time.time()
        try:
            outcome = action()
            self.done.append(name)
            return outcome
        except self.ERRORS as exc:
            self.problems.append('%s: %s' % (name, exc))
            self.failed[name] = str(exc)
            return None
        finally:
            self.timings[name] = round(time.time() - begun, 3)


def _restore_file(entry):
    """Put a regular file's pre-run bytes, mode and owner back; False when they are there already."""
    path = entry['path']
    data = read_bytes(entry['backup'])
    if _sha256(data) != entry['sha256']:
        raise GuardError('the backup of %s is damaged (sha256 differs); left it as it is' % path)
    try:
        if read_bytes(path) == data and not os.path.islink(path):
            return False
    except (IOError, OSError):
        pass
    write_atomic(path, data, entry['mode'], '.gpuops-restore', (entry['uid'], entry['gid']))
    return True


def _read_stop_marker(path):
    if not path:
        return None
    try:
        with open(path) as handle:
            return float(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


# --- the watcher's command line ----------------------------------------------------

def watch(guard, run_id, clock=time.time, sleep=time.sleep):
    """Poll the guard until its run confirms (None) or a bound passes ('idle' or 'deadline')."""
    while True:
        state = guard.state()
        if state is None or state.get('run_id') != run_id:
            return None
        bound = due(state, read_lease(guard.folder), clock())
        if bound is not None:
            return bound
        sleep(WATCH_INTERVAL)


REASONS = {
    'idle': 'nothing of the run renewed the guard for its idle bound (%ss): the controller is gone',
    'deadline': 'the run did not confirm the new server within its deadline (%ss after arming)',
}


def main(argv):
    """``watch``: wait for the lease to lapse or the deadline (exit when confirmed), then restore.
    ``fire``: restore now (the deadline's timer of guards armed before the lease)."""
    import argparse
    parser = argparse.ArgumentParser(prog='gpuops_sglang_guard')
    parser.add_argument('command', choices=['watch', 'fire'])
    parser.add_argument('--folder', required=True)
    parser.add_argument('--run-id', required=True)
    parser.add_argument('--reason', default=None)
    args = parser.parse_args(argv)
    guard = Guard(args.folder, lock_timeout=3600)
    bound = watch(guard, args.run_id) if args.command == 'watch' else 'deadline'
    if bound is None:
        return 0
    state = guard.state() or {}
    seconds = state.get('idle') if bound == 'idle' else float(state.get('deadline', 0)) - float(state.get('armed_at', 0))
    reason = args.reason or REASONS[bound] % int(seconds or 0)
    report = guard.restore(reason, bound, run_id=args.run_id, bound=bound)
    if report is not None:
        sys.stdout.write(json.dumps(report, sort_keys=True) + '\n')
    return 0 if report is None or report['healthy'] else 1
