# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local process source: the host the module runs on, read from /proc and signalled with os.kill.

Same verbs as the container source in _pct.py (list, signal, alive), plus
``holders``: who has given files open or mapped (what fuser does, without it).

Pure standard library: a host-side helper imports this without Ansible.
"""

from __future__ import annotations

import os
import pwd
import re
from typing import Any, Iterator

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    MARK_NAMES,
    SIGNALS,
    ProcessMarks,
    ProcessRecord,
    marks_from,
)

DELETED = ' (deleted)'


def parse_stat(stat: str) -> tuple[str, str, int, int]:
    """(comm, state, ppid, start_time) from the text of /proc/PID/stat."""
    # comm sits in parentheses and may itself contain spaces and ')'.
    comm = stat[stat.find('(') + 1:stat.rfind(')')]
    fields = stat[stat.rfind(')') + 2:].split()
    # Fields after comm start at field 3 (state); starttime is field 22.
    return comm, fields[0], int(fields[1]), int(fields[19])


def read_proc_record(pid: int, proc_root: str = '/proc') -> ProcessRecord | None:
    """ProcessRecord for one PID from /proc, or None if it is gone."""
    base = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(base, 'stat'), 'rb') as stat_file:
            stat = stat_file.read().decode('utf-8', 'replace')
        with open(os.path.join(base, 'cmdline'), 'rb') as cmdline_file:
            raw_cmdline = cmdline_file.read()
        comm, state, ppid, start_time = parse_stat(stat)
    except (OSError, IndexError, ValueError):
        return None
    # setproctitle pads the argv area with NULs; kernel threads have none.
    cmdline = raw_cmdline.replace(b'\0', b' ').decode('utf-8', 'replace').strip()
    if not cmdline:
        cmdline = '[%s]' % comm
    return ProcessRecord(pid, ppid, state, cmdline, name=comm, start_time=start_time)


def read_marks(pid: int, proc_root: str = '/proc') -> ProcessMarks:
    """What PID carries of its server (ServerOwnership): the marks in its environment and its unit, from
    /proc/PID/environ and /proc/PID/cgroup. Another user's environment takes root to read (the modules run as
    root); what cannot be read carries nothing. Only the marks are kept of the environment: it may hold secrets."""
    base = os.path.join(proc_root, str(pid))
    environment = []
    try:
        with open(os.path.join(base, 'environ'), 'rb') as handle:
            environment = [entry.decode('utf-8', 'replace') for entry in handle.read().split(b'\0')
                           if entry.split(b'=', 1)[0].decode('utf-8', 'replace') in MARK_NAMES]
    except OSError:
        pass
    try:
        with open(os.path.join(base, 'cgroup'), 'rb') as handle:
            cgroup = handle.read().decode('utf-8', 'replace').splitlines()
    except OSError:
        cgroup = []
    return marks_from(environment, cgroup)


def read_identity(pid: int, proc_root: str = '/proc') -> tuple[str | None | None, tuple[int, int, int, int] | None]:
    """(executable, uids) of PID: the real path of its program and its four uids; None for what cannot be read.

    Unlike the command line, neither is the process's own choice (``is_excluded_daemon`` decides on them).
    Reading another user's /proc/PID/exe takes root (ptrace access); the module runs as root.
    """
    base = os.path.join(proc_root, str(pid))
    try:
        executable = os.readlink(os.path.join(base, 'exe'))
    except OSError:
        executable = None
    if executable is not None and executable.endswith(DELETED):
        # A program replaced on disk since it started (a driver upgrade) keeps its path, with this note.
        executable = executable[:-len(DELETED)]
    uids = None
    try:
        with open(os.path.join(base, 'status'), 'rb') as status:
            for line in status:
                if line.startswith(b'Uid:'):
                    uids = tuple(int(value) for value in line.split()[1:])
                    break
    except (OSError, ValueError):
        uids = None
    return executable, uids


def user_named(uid: int) -> str:
    """The account name of a uid, or the uid itself where the host has no account for it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


# A GPU's device file: /dev/nvidiaN, N its device minor (nvidiactl, nvidia-uvm and nvidia-caps/* are no GPU).
GPU_DEVICE = re.compile(r'(?:^|/)nvidia([0-9]+)$')


def gpu_minors(devices: list[Any]) -> list[Any]:
    """The device minors of the GPUs among device paths, sorted."""
    return sorted({int(found.group(1)) for found in (GPU_DEVICE.search(path) for path in devices) if found})


def described(record: ProcessRecord, proc_root: str = '/proc', devices: list[str] | None = None) -> dict[str, Any]:
    """{pid, user, cmdline, gpus} of a process as a dry run lists what it would end: its effective user (from
    /proc/PID/status, not its command line), and the GPUs (device minors) of the devices it holds."""
    uids = read_identity(record.pid, proc_root)[1]
    return {'pid': record.pid, 'user': user_named(uids[1]) if uids else None, 'cmdline': record.cmdline,
            'gpus': gpu_minors(devices or [])}


def open_files(pid: int, proc_root: str = '/proc') -> Iterator[str]:
    """What each open file descriptor of pid points to (a path, or ``socket:[INODE]`` and the like); nothing when
    it is gone or its descriptors cannot be read (another user's, without root)."""
    fd_dir = os.path.join(proc_root, str(pid), 'fd')
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue


def protected_pids(proc_root: str = '/proc', pid: int | None = None) -> set[int]:
    """This process and every ancestor: never signalled, whatever their command line."""
    guarded = set()
    current = os.getpid() if pid is None else pid
    while current and current not in guarded:
        guarded.add(current)
        record = read_proc_record(current, proc_root)
        if record is None:
            break
        current = record.ppid
    return guarded


class LocalProcesses:
    """Processes of the host the module runs on, read from /proc."""

    # Reading a few /proc entries costs microseconds: a draining server is seen gone within 0.05 s
    # (inside the outage window every tenth of a second of polling slack is downtime).
    poll_max_interval = 0.05

    def __init__(self, proc_root: str = '/proc') -> None:
        self.proc_root = proc_root

    def pids(self) -> list[int]:
        return sorted(int(entry) for entry in os.listdir(self.proc_root) if entry.isdigit())

    def list(self, with_marks: bool = False) -> list[ProcessRecord]:
        """Every process; with_marks, each with what it carries of its server (read_marks)."""
        records = []
        for pid in self.pids():
            record = read_proc_record(pid, self.proc_root)
            if record is not None:
                if with_marks:
                    record.marks = read_marks(pid, self.proc_root)
                records.append(record)
        return records

    def signal(self, records: list[ProcessRecord], signame: str) -> list[ProcessRecord]:
        """Signal each record still running as the same process (PID and start time); return those signalled."""
        sent = []
        for record in records:
            current = read_proc_record(record.pid, self.proc_root)
            if current is None or not current.same_process(record):
                continue
            try:
                os.kill(record.pid, SIGNALS[signame])
            except OSError:
                # It exited between the check and the kill: that is the goal.
                continue
            sent.append(record)
        return sent

    def alive(self, records: list[ProcessRecord]) -> list[Any]:
        still = []
        for record in records:
            current = read_proc_record(record.pid, self.proc_root)
            if current is not None and current.same_process(record) and not current.is_zombie:
                still.append(current)
        return still

    def holders(self, device_paths: list[str]) -> dict[str, Any]:
        """Map PID -> sorted device paths it holds open or mapped (fuser semantics, no fuser).

        fuser -v on a real H200 missed the /dev/nvidia-caps files a torch process
        held; reading /proc/PID/fd finds all of them.
        """
        wanted = set(device_paths)
        found = {}
        for pid in self.pids():
            held = {target for target in open_files(pid, self.proc_root) if target in wanted}
            held.update(self._mapped(pid, wanted))
            if held:
                found[pid] = sorted(held)
        return found

    def _mapped(self, pid: int, wanted: set[str]) -> set[Any]:
        mapped = set()
        try:
            with open(os.path.join(self.proc_root, str(pid), 'maps'), 'rb') as maps:
                for line in maps:
                    parts = line.decode('utf-8', 'replace').split(None, 5)
                    if len(parts) == 6 and parts[5].strip() in wanted:
                        mapped.add(parts[5].strip())
        except OSError:
            pass
        return mapped
