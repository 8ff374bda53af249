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
  files/N      the pre-run bytes of each file
  fired.json   what the last restore did (the host-side report)
  lib/         this file and the policy files it imports, run without Ansible by the
               watcher: a transient systemd timer where systemd runs, a detached process
               in its own session elsewhere

Pure standard library plus this collection's own module_utils (installed into lib/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from ansible_collections.gpuops.sglang.plugins.module_utils._nvidia import (
    NvidiaSmiCommand,
    NvidiaSmiError,
    gpus_over,
    parse_gpus,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._polling import poll_until
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import (
    compile_patterns,
    select,
    terminate,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._procfs import LocalProcesses, protected_pids
from ansible_collections.gpuops.sglang.plugins.module_utils._router import Router, RouterError
from ansible_collections.gpuops.sglang.plugins.module_utils._server import (
    Server,
    ServerError,
    subprocess_runner,
)

PACKAGE = 'ansible_collections.gpuops.sglang.plugins.module_utils'
# What the watcher imports, installed into lib/ from the collection that armed the guard.
RUNTIME_FILES = ('_guard.py', '_server.py', '_processes.py', '_procfs.py', '_polling.py', '_nvidia.py', '_router.py')
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


# --- small file helpers ------------------------------------------------------

def _write_atomic(path, data, mode=0o600):
    tmp = '%s.tmp.%d' % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError):
        return None
    except ValueError:
        # A state file is only ever replaced by rename; an unreadable one was not written by us.
        raise GuardError('%s is not valid JSON; inspect it before running again' % path)


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


class Lock(object):
    """flock on the guard folder's lock file, with a bounded wait."""

    def __init__(self, folder, timeout):
        self.path = os.path.join(folder, 'lock')
        self.timeout = timeout
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

        def try_lock():
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                return False
        if not poll_until(try_lock, bool, self.timeout, first_interval=0.05, max_interval=0.5):
            os.close(self.fd)
            raise GuardError('another run or the guard itself holds %s (restoring?); gave up after %ss'
                             % (self.path, self.timeout))
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        return False


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
            _write_atomic(path, data, 0o600)
            changed = True
        return changed

    def arm(self, run_id, deadline_s, files, server, host, python, settings, systemd):
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
                'files': entries, 'server': server, 'settings': settings, 'python': python,
                'watcher': 'systemd' if systemd else 'detached', 'unit': self.unit_name(server['service_name']),
            }
            # Written last: a crash before this line leaves no guard, only unused backups.
            _write_atomic(self.state_path, json.dumps(state, indent=1, sort_keys=True).encode('utf-8'))
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
        with open(path, 'rb') as handle:
            data = handle.read()
        _write_atomic(backup, data, 0o600)
        entry.update(kind='file', sha256=_sha256(data))
        return entry

    def _start_watcher(self, state, deadline_s):
        argv = [state['python'], '-I', self.entry_point, 'fire', '--folder', self.folder,
                '--run-id', state['run_id'], '--reason', 'the run did not confirm the new server within %ss'
                % int(deadline_s)]
        if state['watcher'] == 'systemd':
            unit = state['unit']
            # A stale unit of an earlier guard (already restored) would make systemd-run refuse the name.
            self._run(['systemctl', 'stop', unit + '.timer', unit + '.service'])
            self._run(['systemctl', 'reset-failed', unit + '.timer', unit + '.service'])
            rc, out, err = self._run(['systemd-run', '--unit=' + unit, '--on-active=%dms' % int(deadline_s * 1000),
                                      '--timer-property=AccuracySec=100ms', '--property=KillMode=process',
                                      '--description=gpuops.sglang rollback guard for ' + state['server']['service_name']]
                                     + argv)
            if rc != 0:
                raise GuardError('systemd-run could not arm the guard timer (rc %s): %s' % (rc, (err or out).strip()))
            return
        argv[3] = 'watch'
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
        if state.get('watcher') == 'systemd':
            # Only the timer: when the deadline fired, its service is the process running this.
            self._run(['systemctl', 'stop', state['unit'] + '.timer'])
        # A detached watcher sees the state gone (or another run's) and exits by itself.

    # --- restore -----------------------------------------------------------------

    def restore(self, reason, acted_by, run_id=None):
        """Put back the pre-run state and start the previous server; None when no guard is armed.

        Returns the report it also writes to fired.json.
        """
        with Lock(self.folder, self.lock_timeout):
            state = self.state()
            if state is None or (run_id is not None and state.get('run_id') != run_id):
                return None
            report = self._restore(state, reason, acted_by)
            _write_atomic(self.fired_path, json.dumps(report, indent=1, sort_keys=True).encode('utf-8'), 0o644)
            # Removed last: a restore cut short is finished by the next one.
            self._drop(state)
            return report

    def _restore(self, state, reason, acted_by):
        started = time.time()
        settings = state['settings']
        server = Server.from_dict(state['server'], runner=self.runner)
        steps, problems = [], []
        timings, failed = {}, {}

        def step(name, action):
            t0 = time.time()
            try:
                outcome = action()
                steps.append(name)
                return outcome
            except (ServerError, GuardError, NvidiaSmiError, RouterError, OSError, ValueError) as exc:
                problems.append('%s: %s' % (name, exc))
                failed[name] = str(exc)
                return None
            finally:
                timings[name] = round(time.time() - t0, 3)

        if settings.get('router'):
            # The run may have put the new server back already (or never taken the old one out):
            # no request may be routed to a server that is about to stop.
            step('take the server out of the router', lambda: self._take_out(settings['router']))
        step('stop the server that runs now', server.stop)
        step('stop what is left of SGLang', lambda: self._kill_leftovers(settings))
        restored = step('restore the pre-run files', lambda: self._restore_files(state['files']))
        if server.manager == 'systemd':
            step('reload systemd', lambda: self._run(['systemctl', 'daemon-reload']))
        step('wait for the GPUs', lambda: self._wait_gpus(settings))
        previous = any(entry['existed'] for entry in state['files']
                       if entry['path'] == state['server']['launch_file'])
        health = {'healthy': False, 'healthy_at': None, 'why': None}
        if not previous:
            problems.append('there was no previous server to start (no launch configuration before the run)')
        else:
            launched = step('start the previous server', lambda: server.start(daemon_reload=False))
            if launched is not None:
                health = server.wait_healthy(float(settings.get('health_timeout', 900)),
                                             float(settings.get('health_interval', 0.25)), died=launched[1])
                timings['wait for health'] = round(time.time() - (launched[0]['started_at']), 3)
                if not health['healthy']:
                    problems.append('the previous server is not healthy: %s' % health['why'])
        healthy = bool(health['healthy'])
        readmitted, router_problem = None, None
        if settings.get('router'):
            # The previous server's key is in the restored launch configuration (it may differ from the run's).
            readmitted = bool(healthy and step('put the server back into the router',
                                               lambda: self._readmit(settings['router'], server.api_key())))
            if not readmitted:
                router_problem = failed.get('put the server back into the router') or \
                    'the restored server is not healthy, so it was not put back'
        stopped_at = _read_stop_marker(settings.get('stop_marker'))
        return {
            'run_id': state['run_id'], 'host': state['host'], 'acted_by': acted_by,
            'status': 'rolled_back' if healthy else 'failed',
            'healthy': healthy,
            'reason': reason,
            'restored_files': restored or [],
            'steps': steps, 'problems': problems, 'timings': timings,
            'started_at': started, 'finished_at': time.time(), 'healthy_at': health.get('healthy_at'),
            'downtime_s': round(health['healthy_at'] - stopped_at, 2) if healthy and stopped_at else None,
            'router_readmitted': readmitted,
            'router_problem': router_problem,
            'hostname': socket.gethostname(),
        }

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
            tmp = '%s.gpuops-restore.%d' % (path, os.getpid())
            if entry['kind'] == 'symlink':
                if os.path.islink(path) and os.readlink(path) == entry['target']:
                    continue
                os.symlink(entry['target'], tmp)
            else:
                with open(entry['backup'], 'rb') as handle:
                    data = handle.read()
                if _sha256(data) != entry['sha256']:
                    raise GuardError('the backup of %s is damaged (sha256 differs); left it as it is' % path)
                try:
                    with open(path, 'rb') as handle:
                        if handle.read() == data and not os.path.islink(path):
                            continue
                except (IOError, OSError):
                    pass
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, entry['mode'])
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.chmod(tmp, entry['mode'])
                try:
                    os.chown(tmp, entry['uid'], entry['gid'])
                except OSError:
                    pass
            os.rename(tmp, path)
            restored.append(path)
        return restored

    def _wait_gpus(self, settings):
        nvidia_smi = settings.get('nvidia_smi')
        if not nvidia_smi:
            return None
        argv = NvidiaSmiCommand(nvidia_smi).query_gpus()
        limit = int(settings.get('max_used_mib', 0))
        readings = {}

        def read():
            rc, out, err = self._run(argv, 30)
            if rc != 0:
                readings['error'] = (err or out).strip()
                return None
            readings['gpus'] = parse_gpus(out)
            return readings['gpus']
        gpus = poll_until(read, lambda g: g is not None and not gpus_over(g, limit),
                          float(settings.get('gpu_timeout', 60)), first_interval=0.05, max_interval=0.5)
        if gpus is None:
            raise GuardError('nvidia-smi failed: %s' % readings.get('error'))
        busy = gpus_over(gpus, limit)
        if busy:
            raise GuardError('GPU memory still in use: %s' % ', '.join(
                'GPU %s %s MiB' % (gpu['index'], gpu['memory_used_mib']) for gpu in busy))
        return gpus


def _read_stop_marker(path):
    if not path:
        return None
    try:
        with open(path) as handle:
            return float(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


# --- the watcher's command line ----------------------------------------------------

def main(argv):
    """``watch``: wait for the deadline (exit when confirmed), then restore. ``fire``: restore now."""
    import argparse
    parser = argparse.ArgumentParser(prog='gpuops_sglang_guard')
    parser.add_argument('command', choices=['watch', 'fire'])
    parser.add_argument('--folder', required=True)
    parser.add_argument('--run-id', required=True)
    parser.add_argument('--reason', default='deadline passed')
    args = parser.parse_args(argv)
    guard = Guard(args.folder, lock_timeout=3600)
    if args.command == 'watch':
        while True:
            state = guard.state()
            if state is None or state.get('run_id') != args.run_id:
                return 0
            if time.time() >= state['deadline']:
                break
            time.sleep(min(WATCH_INTERVAL, max(0.0, state['deadline'] - time.time())))
    report = guard.restore(args.reason, 'deadline', run_id=args.run_id)
    if report is not None:
        sys.stdout.write(json.dumps(report, sort_keys=True) + '\n')
    return 0 if report is None or report['healthy'] else 1
