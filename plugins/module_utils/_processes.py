# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Process records, pattern selection and the one TERM-wait-KILL policy.

Two process sources share this policy: the local /proc (gpu_release) and a
container seen through ``pct exec`` (pct_exec_kill, see _pct.py). A source
offers three verbs: ``list()``, ``signal(records, signame)`` and
``alive(records)``. The policy never touches /proc or signals itself, so it is
tested with a fake source.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import signal as _signal
import time

from ansible_collections.gpuops.sglang.plugins.module_utils._polling import poll_until

# Upstream SGLang's own cleanup (test_utils kill_process_tree callers and the
# killall scripts) matches these command lines; /proc/PID/comm is cut to 15
# characters ("sglang::schedul"), so patterns run against the full command line.
DEFAULT_SGLANG_PATTERNS = [
    r'sglang::',
    r'sglang\.launch_server',
    r'sglang\.bench',
    r'sglang\.data_parallel',
    r'sglang\.srt',
]

SIGNALS = {'TERM': _signal.SIGTERM, 'KILL': _signal.SIGKILL}


class ProcessSourceError(Exception):
    """A process source could not list or signal processes."""


class ProcessRecord(object):
    """One process as a source saw it. ``state`` is the ps/proc state letter(s)."""

    __slots__ = ('pid', 'ppid', 'state', 'cmdline', 'name')

    def __init__(self, pid, ppid, state, cmdline, name=None):
        self.pid = int(pid)
        self.ppid = int(ppid)
        self.state = state
        self.cmdline = cmdline
        self.name = name if name is not None else _name_from_cmdline(cmdline)

    @property
    def is_zombie(self):
        # A zombie holds no memory and no files; it only waits for its parent
        # to reap it, so for "is it gone" it counts as gone.
        return self.state.startswith('Z') or self.state.startswith('X')

    def same_process(self, other):
        # PIDs are reused; the command line guards against signalling a
        # newcomer that took the PID of a process that already exited.
        return self.pid == other.pid and self.cmdline == other.cmdline

    def describe(self):
        return 'pid %d (state %s): %s' % (self.pid, self.state, self.cmdline)

    def __repr__(self):
        return 'ProcessRecord(%r, %r, %r, %r)' % (self.pid, self.ppid, self.state, self.cmdline)


def _name_from_cmdline(cmdline):
    first = cmdline.split(' ', 1)[0] if cmdline else ''
    return os.path.basename(first)


def compile_patterns(patterns, what='pattern'):
    """Compile regexes, raising ValueError that names the bad one."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError('invalid %s %r: %s' % (what, pattern, exc))
    return compiled


def select(records, patterns, protected_pids=()):
    """Records whose command line matches any pattern, once per PID, minus protected PIDs."""
    chosen = {}
    for record in records:
        if record.pid in protected_pids or record.pid in chosen or record.is_zombie:
            continue
        if any(pattern.search(record.cmdline) for pattern in patterns):
            chosen[record.pid] = record
    return [chosen[pid] for pid in sorted(chosen)]


def killed_entry(record, signame):
    return {'pid': record.pid, 'cmdline': record.cmdline, 'signal': signame}


def planned_kills(targets, term_timeout):
    """What check mode reports: each target with the first signal terminate() would send."""
    signame = 'KILL' if term_timeout <= 0 else 'TERM'
    return [killed_entry(record, signame) for record in targets]


class TerminationOutcome(object):
    def __init__(self, killed, remaining):
        self.killed = killed
        self.remaining = remaining


def terminate(source, targets, term_timeout, kill_timeout=10.0,
              clock=time.monotonic, sleep=time.sleep):
    """SIGTERM the targets, wait up to term_timeout, SIGKILL survivors, wait up to kill_timeout.

    Waits poll rather than sleep a fixed time: a GPU holder killed with SIGKILL
    is gone in well under a second, a draining server may need all of
    term_timeout. Returns who got which last signal and who is still alive.
    """
    last_signal = {}
    if not targets:
        return TerminationOutcome([], [])
    survivors = list(targets)
    if term_timeout > 0:
        source.signal(survivors, 'TERM')
        for record in survivors:
            last_signal[record.pid] = 'TERM'
        survivors = wait_until_gone(source, survivors, term_timeout, clock, sleep)
    if survivors:
        source.signal(survivors, 'KILL')
        for record in survivors:
            last_signal[record.pid] = 'KILL'
        survivors = wait_until_gone(source, survivors, kill_timeout, clock, sleep)
    killed = [killed_entry(record, last_signal[record.pid]) for record in targets]
    return TerminationOutcome(killed, survivors)


def wait_until_gone(source, records, timeout, clock=time.monotonic, sleep=time.sleep):
    """Poll source.alive() until none of records is left or timeout passes; return the survivors."""
    return poll_until(lambda: source.alive(records), lambda alive: not alive, timeout,
                      first_interval=0.02, max_interval=0.5, clock=clock, sleep=sleep)


# --- the local /proc source -------------------------------------------------

def read_proc_record(pid, proc_root='/proc'):
    """ProcessRecord for one PID from /proc, or None if it is gone."""
    base = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(base, 'stat'), 'rb') as stat_file:
            stat = stat_file.read().decode('utf-8', 'replace')
        with open(os.path.join(base, 'cmdline'), 'rb') as cmdline_file:
            raw_cmdline = cmdline_file.read()
    except (IOError, OSError):
        return None
    # comm sits in parentheses and may itself contain spaces and ')'.
    comm = stat[stat.find('(') + 1:stat.rfind(')')]
    fields = stat[stat.rfind(')') + 2:].split()
    state, ppid = fields[0], int(fields[1])
    # setproctitle pads the argv area with NULs; kernel threads have none.
    cmdline = raw_cmdline.replace(b'\0', b' ').decode('utf-8', 'replace').strip()
    if not cmdline:
        cmdline = '[%s]' % comm
    return ProcessRecord(pid, ppid, state, cmdline, name=comm)


def protected_pids(proc_root='/proc', pid=None):
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


class LocalProcesses(object):
    """Processes of the host the module runs on, read from /proc."""

    def __init__(self, proc_root='/proc'):
        self.proc_root = proc_root

    def pids(self):
        return sorted(int(entry) for entry in os.listdir(self.proc_root) if entry.isdigit())

    def list(self):
        records = []
        for pid in self.pids():
            record = read_proc_record(pid, self.proc_root)
            if record is not None:
                records.append(record)
        return records

    def signal(self, records, signame):
        for record in records:
            current = read_proc_record(record.pid, self.proc_root)
            if current is None or not current.same_process(record):
                continue
            try:
                os.kill(record.pid, SIGNALS[signame])
            except OSError:
                # It exited between the check and the kill: that is the goal.
                pass

    def alive(self, records):
        still = []
        for record in records:
            current = read_proc_record(record.pid, self.proc_root)
            if current is not None and current.same_process(record) and not current.is_zombie:
                still.append(current)
        return still

    def holders(self, device_paths):
        """Map PID -> sorted device paths it holds open or mapped (fuser semantics, no fuser).

        fuser -v on a real H200 missed the /dev/nvidia-caps files a torch process
        held; reading /proc/PID/fd finds all of them.
        """
        wanted = set(device_paths)
        found = {}
        for pid in self.pids():
            held = set()
            fd_dir = os.path.join(self.proc_root, str(pid), 'fd')
            try:
                fds = os.listdir(fd_dir)
            except (IOError, OSError):
                continue
            for fd in fds:
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except (IOError, OSError):
                    continue
                if target in wanted:
                    held.add(target)
            held.update(self._mapped(pid, wanted))
            if held:
                found[pid] = sorted(held)
        return found

    def _mapped(self, pid, wanted):
        mapped = set()
        try:
            with open(os.path.join(self.proc_root, str(pid), 'maps'), 'rb') as maps:
                for line in maps:
                    parts = line.decode('utf-8', 'replace').split(None, 5)
                    if len(parts) == 6 and parts[5].strip() in wanted:
                        mapped.add(parts[5].strip())
        except (IOError, OSError):
            pass
        return mapped
