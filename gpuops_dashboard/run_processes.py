"""The processes of one ansible-runner run, and ending them all when the run is cancelled.

ansible-runner's cancel SIGKILLs ansible-playbook's process group. Ansible's ssh connection starts each ssh client
in a session of its own (ansible-core 2.19, for ssh's askpass), so the clients outlive that kill; a client that
lives on keeps its session open, and the module at the other end (a start in flight, say) cannot tell that its
controller is gone: it goes on, starts its server and renews the rollback guard's lease until it ends (measured on
the lab, tests/lab/test_lease.py). Killing the clients as well closes their sessions, and the module sees its stdout
lose its reader at once (plugins/module_utils/base/_controller.py).

A process belongs to the run when its environment holds the run's artifacts folder in AWX_ISOLATED_DATA_DIR, which
ansible-runner gives ansible-playbook and every process it starts inherits. Only ansible-playbook (its forked workers
carry its command line) and the ssh clients are ended: a server or a guard watcher that a module started on this
machine (a host on the local connection) inherits the variable too and must go on, and ssh's connection masters
(ControlPersist, "ssh: PATH [mux]") are left alone: another run to the same host may share one, and closing a
client's own session is enough.
"""
from __future__ import annotations

import os
import signal

RUN_VARIABLE = b'AWX_ISOLATED_DATA_DIR='
PROC = '/proc'


def _read(path: str) -> bytes:
    with open(path, 'rb') as handle:
        return handle.read()


def run_processes(private_data_dir: str, proc: str = PROC) -> list[tuple[int, str]]:
    """(PID, 'ansible-playbook' or 'ssh') of the run's processes that a cancel ends, in /proc's order."""
    prefix = RUN_VARIABLE + os.fsencode(os.path.join(os.path.abspath(private_data_dir), 'artifacts')) + b'/'
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = _read(os.path.join(proc, entry, 'environ'))
            cmdline = _read(os.path.join(proc, entry, 'cmdline'))
        except OSError:
            # Gone meanwhile, or another user's.
            continue
        if not any(item.startswith(prefix) for item in environ.split(b'\0')):
            continue
        kind = _controller_process(cmdline)
        if kind:
            found.append((int(entry), kind))
    return found


def _controller_process(cmdline: bytes) -> str | None:
    """'ssh' for an ssh client, 'ansible-playbook' for it or one of its workers (python PATH/ansible-playbook ...,
    or the script itself), None for anything else: an ssh connection master's command line is "ssh: PATH [mux]"."""
    names = [os.path.basename(arg) for arg in cmdline.split(b'\0')[:2]]
    if names and names[0] == b'ssh':
        return 'ssh'
    return 'ansible-playbook' if b'ansible-playbook' in names else None


def end_run(private_data_dir: str, proc: str = PROC, passes: int = 3) -> list[tuple[int, str]]:
    """SIGKILL every process of the run that run_processes names; again for what a worker started meanwhile.
    Returns (PID, kind) of each one signalled."""
    ended: list[tuple[int, str]] = []
    for dummy in range(passes):
        found = [item for item in run_processes(private_data_dir, proc) if item not in ended]
        if not found:
            break
        for pid, kind in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            ended.append((pid, kind))
    return ended
