#!/usr/bin/python3
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Starts and stops the SGLang server described by a launch.json, without any shell.

Installed by the gpuops.sglang.sglang role.
  launcher.py run LAUNCH_JSON                              exec the server (systemd's ExecStart)
  launcher.py start LAUNCH_JSON --pidfile P --log L        detached: own session, pid file, log file
  launcher.py stop --pidfile P [--timeout T]               SIGTERM the session, wait, SIGKILL
  launcher.py status --pidfile P                           exit 0 when the server runs
launch.json: {"python": ..., "module": ..., "args": [...], "environment": {...}}
The server is exec'd as ``PYTHON -m MODULE ARGS``, so its command line is what
SGLang's own tooling and pct_exec_kill match.
"""
import argparse
import json
import os
import signal
import sys
import time


def load(path):
    with open(path) as handle:
        spec = json.load(handle)
    argv = [spec['python'], '-m', spec['module']] + [str(arg) for arg in spec.get('args', [])]
    env = dict(os.environ)
    env.update(dict((key, str(value)) for key, value in spec.get('environment', {}).items()))
    return argv, env


def read_pid(pidfile):
    try:
        with open(pidfile) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies keep the group "alive" for killpg; only count members that still run.
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as handle:
                fields = handle.read().rsplit(')', 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ('Z', 'X'):
            return True
    return False


def wait_gone(pgid, timeout):
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def cmd_run(args):
    argv, env = load(args.launch)
    os.execve(argv[0], argv, env)


def cmd_start(args):
    argv, env = load(args.launch)
    pid = read_pid(args.pidfile)
    if pid and group_alive(pid):
        print(json.dumps({'changed': False, 'pid': pid, 'msg': 'already running'}))
        return 0
    log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    child = os.fork()
    if child == 0:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir('/')
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    with open(args.pidfile + '.tmp', 'w') as handle:
        handle.write(str(child))
    os.rename(args.pidfile + '.tmp', args.pidfile)
    # A bad flag makes SGLang exit at once (argparse: 2); report that now, not at the health timeout.
    deadline = time.monotonic() + args.settle
    while time.monotonic() < deadline:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            print(json.dumps({'changed': True, 'pid': child, 'failed': True,
                              'msg': 'server exited at once with status %d; see %s' % (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status), args.log)}))
            return 1
        time.sleep(0.05)
    print(json.dumps({'changed': True, 'pid': child}))
    return 0


def cmd_stop(args):
    pid = read_pid(args.pidfile)
    if not pid or not group_alive(pid):
        print(json.dumps({'changed': False, 'msg': 'not running'}))
        return 0
    os.killpg(pid, signal.SIGTERM)
    last = 'TERM'
    if not wait_gone(pid, args.timeout):
        os.killpg(pid, signal.SIGKILL)
        last = 'KILL'
        if not wait_gone(pid, 10):
            print(json.dumps({'changed': True, 'failed': True, 'msg': 'process group %d survived SIGKILL' % pid}))
            return 1
    os.unlink(args.pidfile)
    print(json.dumps({'changed': True, 'pid': pid, 'signal': last}))
    return 0


def cmd_status(args):
    pid = read_pid(args.pidfile)
    running = bool(pid and group_alive(pid))
    print(json.dumps({'running': running, 'pid': pid if running else None}))
    return 0 if running else 3


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest='command', required=True)
    run = sub.add_parser('run')
    run.add_argument('launch')
    start = sub.add_parser('start')
    start.add_argument('launch')
    start.add_argument('--pidfile', required=True)
    start.add_argument('--log', required=True)
    start.add_argument('--settle', type=float, default=1.0)
    stop = sub.add_parser('stop')
    stop.add_argument('--pidfile', required=True)
    stop.add_argument('--timeout', type=float, default=30)
    status = sub.add_parser('status')
    status.add_argument('--pidfile', required=True)
    args = parser.parse_args()
    return {'run': cmd_run, 'start': cmd_start, 'stop': cmd_stop, 'status': cmd_status}[args.command](args)


if __name__ == '__main__':
    sys.exit(main())
