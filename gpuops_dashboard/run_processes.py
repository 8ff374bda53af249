"""The processes of one ansible-runner run, and ending them all when the run is cancelled.

ansible-runner's cancel SIGKILLs ansible-playbook's process group. ansible-core's workers each start a session of
their own (WorkerProcess._detach calls setsid), so a worker, and the ssh client it runs a module through, outlive
that kill; the client keeps its session open, and the module at the other end (a start in flight, say) cannot tell
that its controller is gone: it goes on, starts its server and renews the rollback guard's lease until it ends
(seen on the lab, tests/lab/test_lease.py). Killing the workers and their clients as well closes those sessions, and
the module sees its stdout lose its reader at once (plugins/module_utils/base/_controller.py).

A process belongs to the run when its environment holds the run's artifacts folder in AWX_ISOLATED_DATA_DIR, which
ansible-runner gives ansible-playbook and every process it starts inherits. Of those, only ansible-playbook and its
forked workers (they carry its command line) and the ssh clients a worker started are ended. A server or a guard
watcher that a module started on this machine (a host on the local connection) inherits the variable too and must
go on; ssh's connection masters (ControlPersist) are not a worker's children once they detach, and another run to
the same host may share one: closing a client's own session is enough. Each process is signalled through a pidfd
opened before it was read, so a PID reused meanwhile is never signalled.
"""
from __future__ import annotations

import os
import signal

RUN_VARIABLE = b'AWX_ISOLATED_DATA_DIR='
PROC = '/proc'
PLAYBOOK, SSH = 'ansible-playbook', 'ssh'


def _read(path: str) -> bytes:
    with open(path, 'rb') as handle:
        return handle.read()


def _parent(stat: bytes) -> int:
    # /proc/PID/stat: "PID (COMM) STATE PPID ...", COMM may hold spaces and parentheses.
    return int(stat.rsplit(b')', 1)[1].split()[1])


def _kind(cmdline: bytes) -> str | None:
    """PLAYBOOK for ansible-playbook or one of its workers (PATH/ansible-playbook, or python PATH/ansible-playbook),
    SSH for an ssh client, None for anything else (a connection master's command line is "ssh: PATH [mux]")."""
    names = [os.path.basename(arg) for arg in cmdline.split(b'\0')[:2]]
    if names and names[0] == b'ssh':
        return SSH
    return PLAYBOOK if b'ansible-playbook' in names else None


def _scan(private_data_dir: str, proc: str) -> list[tuple[int, str, int, int]]:
    """(PID, kind, parent PID, pidfd) of each process of the run that _kind names; the caller closes the pidfds."""
    prefix = RUN_VARIABLE + os.fsencode(os.path.join(os.path.abspath(private_data_dir), 'artifacts')) + b'/'
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            # Opened first: what is read below belongs to this process or to one that took its PID after it
            # ended, and a signal through the pidfd then reaches nobody.
            pidfd = os.pidfd_open(int(entry))
        except OSError:
            continue
        try:
            environ = _read(os.path.join(proc, entry, 'environ'))
            kind = _kind(_read(os.path.join(proc, entry, 'cmdline')))
            parent = _parent(_read(os.path.join(proc, entry, 'stat')))
        except (OSError, IndexError, ValueError):
            # Gone meanwhile, or another user's.
            os.close(pidfd)
            continue
        if kind and any(item.startswith(prefix) for item in environ.split(b'\0')):
            found.append((int(entry), kind, parent, pidfd))
        else:
            os.close(pidfd)
    return found


def _of_the_run(found: list[tuple[int, str, int, int]]) -> list[tuple[int, str, int, int]]:
    """ansible-playbook's processes, and the ssh clients whose parent is one of them."""
    playbooks = {pid for pid, kind, dummy, dummy in found if kind == PLAYBOOK}
    return [item for item in found if item[1] == PLAYBOOK or item[2] in playbooks]


def run_processes(private_data_dir: str, proc: str = PROC) -> list[tuple[int, str]]:
    """(PID, PLAYBOOK or SSH) of the run's processes that a cancel ends, in /proc's order."""
    found = _scan(private_data_dir, proc)
    for item in found:
        os.close(item[3])
    return [(pid, kind) for pid, kind, dummy, dummy in _of_the_run(found)]


def end_run(private_data_dir: str, proc: str = PROC, passes: int = 3) -> list[tuple[int, str]]:
    """SIGKILL every process of the run that run_processes names; again for what a worker started meanwhile.
    Returns (PID, kind) of each one signalled."""
    ended: list[tuple[int, str]] = []
    for _ in range(passes):
        found = _scan(private_data_dir, proc)
        try:
            targets = [item for item in _of_the_run(found) if item[:2] not in ended]
            for pid, kind, dummy, pidfd in targets:
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except OSError:
                    continue
                ended.append((pid, kind))
        finally:
            for item in found:
                os.close(item[3])
        if not targets:
            break
    return ended
