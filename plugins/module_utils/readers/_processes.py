# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Process records, pattern selection and the one TERM-wait-KILL policy.

Two process sources share this policy: the local /proc (gpu_release, see
_procfs.py) and a container seen through ``pct exec`` (pct_exec_kill, see
_pct.py). A source offers three verbs: ``list()``, ``signal(records, signame)``
(returning the records it really signalled) and ``alive(records)``. The policy
never touches /proc or sends a signal itself, so it is tested with a fake
source.

Pure standard library: a host-side helper imports this without Ansible.
"""

from __future__ import annotations

import os
import re
import signal as _signal
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until

# What SGLang runs, anchored (issue 28): its children's titles (`sglang::scheduler_TP0`, `sglang::detokenizer`;
# /proc/PID/comm is cut to 15 characters, "sglang::schedul", so patterns run against the full command line)
# and an interpreter running one of its modules with -m. Upstream's own cleanup searches the bare substrings
# (`sglang.srt`, `sglang.bench`), which also match `vim notes-on-sglang.srt.md` or `tail -f sglang.bench.log`.
# The role's sglang_kill_patterns default is these two plus its launch module.
# `-m` may be joined to its module (`-msglang.launch_server`); newer releases also serve through their console
# script (`sglang serve`, run as `/venv/bin/python3 /venv/bin/sglang serve ...` by its shebang).
PYTHON_DASH_M = r'^(\S*/)?python[0-9.]*( -[WX] \S+| -[^m ]\S*)* -m ?'
DEFAULT_SGLANG_PATTERNS = [
    r'^sglang::',
    PYTHON_DASH_M + r'sglang\.(launch_server|bench_\w+|srt(\.\w+)+|data_parallel\w*)( |$)',
    r'^((\S*/)?python[0-9.]*( -\S+)* )?(\S*/)?sglang serve( |$)',
]

SIGNALS = {'TERM': _signal.SIGTERM, 'KILL': _signal.SIGKILL}

# The highest uid of a system user (SYS_UID_MAX in Debian's and Fedora's login.defs; useradd gives
# people uids from 1000). The NVIDIA daemons run as root or as a system user of their own.
SYSTEM_UID_MAX = 999


class ProcessSourceError(Exception):
    """A process source could not list or signal processes."""


class ProcessRecord:
    """One process as a source saw it.

    ``state`` is the ps/proc state letter(s); ``start_time`` is field 22 of
    /proc/PID/stat (clock ticks after boot), None where a source cannot read it.
    """

    __slots__ = ('pid', 'ppid', 'state', 'cmdline', 'name', 'start_time', 'marks')

    def __init__(self, pid: int | str, ppid: int | str, state: str, cmdline: str, name: str | None = None,
                 start_time: int | str | None = None, marks: ProcessMarks | None = None) -> None:
        self.pid = int(pid)
        self.ppid = int(ppid)
        self.state = state
        self.cmdline = cmdline
        self.name = name if name is not None else _name_from_cmdline(cmdline)
        self.start_time = int(start_time) if start_time is not None else None
        # What its environment and control group say of the server it belongs to; None where the source did not
        # read them (ServerOwnership then goes by its command line and its parents').
        self.marks = marks

    @property
    def is_zombie(self) -> bool:
        # A zombie holds no memory and no files; it only waits for its parent
        # to reap it, so for "is it gone" it counts as gone.
        return self.state.startswith('Z') or self.state.startswith('X')

    @property
    def key(self) -> tuple[int, int]:
        """Identity of the process: a PID is reused, a PID with its start time is not."""
        return (self.pid, self.start_time if self.start_time is not None else self.cmdline)

    def same_process(self, other: ProcessRecord) -> bool:
        # The start time, not the command line, tells a newcomer on a reused PID from the
        # process we saw: SGLang (setproctitle) and others change their command line, also
        # while shutting down. Without a start time, the command line is the best guard.
        if self.pid != other.pid:
            return False
        if self.start_time is not None and other.start_time is not None:
            return self.start_time == other.start_time
        return self.cmdline == other.cmdline

    def describe(self) -> str:
        return 'pid %d (state %s): %s' % (self.pid, self.state, self.cmdline)

    def __repr__(self) -> str:
        return 'ProcessRecord(%r, %r, %r, %r, start_time=%r)' % (
            self.pid, self.ppid, self.state, self.cmdline, self.start_time)


class ProcessSource(Protocol):
    """The three verbs the kill policy needs of a process source: the local /proc (_procfs.LocalProcesses), a
    container seen through `pct exec` (_pct.ContainerProcesses), gpu_release's traced local one."""

    def list(self) -> list[ProcessRecord]: ...

    def signal(self, records: list[ProcessRecord], signame: str) -> list[ProcessRecord]: ...

    def alive(self, records: list[ProcessRecord]) -> list[ProcessRecord]: ...


def _name_from_cmdline(cmdline: str) -> str:
    first = cmdline.split(' ', 1)[0] if cmdline else ''
    return os.path.basename(first)


def compile_patterns(patterns: list[Any], what: str = 'pattern') -> list[Any]:
    """Compile regexes, raising ValueError that names the bad one."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError('invalid %s %r: %s' % (what, pattern, exc))
    return compiled


def is_excluded_daemon(executable: str | None, uids: tuple[int, int, int, int] | None,
                       patterns: list[re.Pattern]) -> bool:
    """True when a holder is one of the daemons ``patterns`` name, judged on what its user cannot choose.

    ``executable`` is the real path of the running program (/proc/PID/exe), matched in full and by base
    name; ``uids`` are its real, effective, saved and filesystem uids. The command name and argv[0] are
    never read: any user can set those (prctl, setproctitle, a symlink, ``exec -a``) and would then
    hold GPU memory through a release. Every uid must be root's or a system user's, so that a user who
    copies a binary to a file named like the daemon is not excluded either. Unknown (unreadable) is
    never excluded.
    """
    if not executable or not uids or max(uids) > SYSTEM_UID_MAX:
        return False
    names = (executable, os.path.basename(executable))
    return any(pattern.search(name) for pattern in patterns for name in names)


def select(records: list[ProcessRecord], patterns: list[re.Pattern],
           protected_pids: set[int] | tuple[()] | frozenset = ()) -> list[Any]:
    """Records whose command line matches any pattern, once per PID, minus protected PIDs."""
    chosen = {}
    for record in records:
        if record.pid in protected_pids or record.pid in chosen or record.is_zombie:
            continue
        if any(pattern.search(record.cmdline) for pattern in patterns):
            chosen[record.pid] = record
    return [chosen[pid] for pid in sorted(chosen)]


# --- whose process: this server's, a neighbour's, or nobody can tell (issue 44) ---------------------------------

# The marks a detached start puts in a server's environment (domain/_server.py, the guard's restore): its children
# inherit them, an orphaned scheduler included, whatever its command line became.
SERVICE_MARK = 'GPUOPS_SGLANG_SERVICE'
LAUNCH_MARK = 'GPUOPS_SGLANG_LAUNCH_FILE'
MARK_NAMES = (SERVICE_MARK, LAUNCH_MARK)
# SGLang's --port as one whole argument (--port 30000 or --port=30000); its children's titles name no port.
PORT_ARGUMENT = re.compile(r'(?:^| )--port(?:=| +)([0-9]+)(?= |$)')
# The innermost systemd service of a control group path (/system.slice/sglang.service, or a user manager's
# .../user@1000.service/app.slice/job.service): a unit's processes stay in it when their parent dies.
SERVICE_UNIT = re.compile(r'(?:^|/)([^/]+)\.service(?=/|$)')


@dataclass(frozen=True)
class ProcessMarks:
    """What a process carries of its server, beside its command line: the marks in its environment and the systemd
    service its control group belongs to. None for what it does not carry."""
    service: str | None = None
    launch_file: str | None = None
    unit: str | None = None


def marks_from(environment: Iterable[str], cgroup_lines: Iterable[str]) -> ProcessMarks:
    """ProcessMarks from NAME=VALUE entries of an environment (only the marks are looked at) and the lines of
    /proc/PID/cgroup (``0::/system.slice/sglang.service``; cgroup v1's ``1:name=systemd:...`` too)."""
    found = {}
    for entry in environment:
        name, sep, value = entry.partition('=')
        if sep and name in MARK_NAMES and name not in found:
            found[name] = value
    unit = None
    for line in cgroup_lines:
        path = line.strip().split(':', 2)[-1]
        units = SERVICE_UNIT.findall(path)
        # The unified hierarchy (0::) or systemd's own (name=systemd) name the unit; other v1 controllers may not.
        if units and (line.startswith('0::') or 'name=systemd' in line or unit is None):
            unit = units[-1]
    return ProcessMarks(found.get(SERVICE_MARK) or None, found.get(LAUNCH_MARK) or None, unit)


def port_of(cmdline: str) -> int | None:
    """The --port a command line gives (the last one, as argparse takes it), or None."""
    ports = PORT_ARGUMENT.findall(cmdline)
    return int(ports[-1]) if ports else None


# A server by what marks its processes, as the modules take it (their `marks` and `neighbours` options; the doc
# fragment gpuops.sglang.neighbours documents it).
MARKS_SPEC = dict(service_name=dict(type='str'), port=dict(type='int'), launch_file=dict(type='path'),
                  name=dict(type='str', default=''))
NEIGHBOURS_OPTION = dict(type='list', elements='dict', default=[], options=MARKS_SPEC)


@dataclass(frozen=True)
class ServerMarks:
    """What tells one server's processes from a neighbour's on the same machine, under the same user too: its service
    name (its unit's control group, or the service mark of a detached start), its ports (``--port`` in its command
    line) and its launch file (the launch mark). ``name`` is how messages call it (its inventory host)."""
    service_name: str | None = None
    ports: tuple[int, ...] = ()
    launch_file: str | None = None
    name: str = ''

    @classmethod
    def from_option(cls, option: dict[str, Any]) -> ServerMarks:
        """From a module option {service_name, port (or ports), launch_file, name}; any may be missing."""
        ports = list(option.get('ports') or []) + ([option['port']] if option.get('port') is not None else [])
        launch_file = option.get('launch_file') or None
        return cls(option.get('service_name') or None, tuple(sorted({int(port) for port in ports})),
                   os.path.abspath(launch_file) if launch_file else None, option.get('name') or '')

    @property
    def known(self) -> bool:
        return bool(self.service_name or self.ports or self.launch_file)

    def describe(self) -> str:
        said = ['service %s' % self.service_name] if self.service_name else []
        said += ['port %s' % '/'.join(str(port) for port in self.ports)] if self.ports else []
        said += ['launch file %s' % self.launch_file] if self.launch_file else []
        return '%s(%s)' % ('%s ' % self.name if self.name else '', ', '.join(said) or 'no marks')


def _matches(record: ProcessRecord, server: ServerMarks) -> tuple[list[str], list[str]]:
    """(what of record names server, what of record names another server than it); a mark server does not know
    neither matches nor conflicts. A unit is a match only: a process of another unit (cron, a user manager, the
    guard's own watcher) may still be this server's."""
    marks = record.marks or ProcessMarks()
    matches, conflicts = [], []
    launch = os.path.abspath(marks.launch_file) if marks.launch_file else None
    if launch and server.launch_file:
        (matches if launch == server.launch_file else conflicts).append('its environment names the launch file %s'
                                                                        % launch)
    if marks.service and server.service_name:
        (matches if marks.service == server.service_name else conflicts).append(
            'its environment names the service %s' % marks.service)
    if marks.unit and marks.unit == server.service_name:
        matches.append('it runs in the unit %s.service' % marks.unit)
    port = port_of(record.cmdline)
    if port is not None and server.ports:
        (matches if port in server.ports else conflicts).append('its command line serves --port %d' % port)
    return matches, conflicts


class ServerOwnership:
    """Whose a process matching the kill patterns is: the stopping server's (``own``), a neighbour's on the same
    machine (``neighbours``, declared by the role from the inventory), or nobody's that can be told.

    A process is judged by its own marks, else by its nearest parent that carries any (a scheduler whose parent
    is alive carries nothing of its own). It is spared, never signalled, when it carries a neighbour's marks, or
    a mark that is not this server's (another --port, another launch file or service); when nothing it or its
    parents carry names any server, it is spared only while neighbours are declared (it may be theirs), and
    ended otherwise, as on a machine the server owns. Without own marks and neighbours, every match is ended:
    today's behaviour of a server that owns its machine.
    """

    # Parents looked at: SGLang's tree is two deep (launcher, schedulers); a shell between adds one.
    MAX_DEPTH = 8

    def __init__(self, own: ServerMarks | None = None, neighbours: Iterable[ServerMarks] = ()) -> None:
        self.own = own or ServerMarks()
        self.neighbours = [neighbour for neighbour in neighbours if neighbour.known]

    @property
    def judges(self) -> bool:
        """Whether anything is spared at all (else every match is this server's, as before issue 44)."""
        return self.own.known or bool(self.neighbours)

    def _verdict(self, record: ProcessRecord, whose: str) -> str | None:
        """Why record (the process, or its parent carrying marks: whose says which) is spared; '' when it is this
        server's; None when it carries nothing that names any server."""
        for neighbour in self.neighbours:
            matches, conflicts = _matches(record, neighbour)
            if matches and not conflicts:
                return '%s the marks of the neighbour server %s: %s' % (whose, neighbour.describe(), '; '.join(matches))
        matches, conflicts = _matches(record, self.own)
        if conflicts:
            return '%s the marks of another server than this one %s: %s' % (
                whose, self.own.describe(), '; '.join(conflicts))
        return '' if matches else None

    def why_spared(self, record: ProcessRecord, by_pid: dict[int, ProcessRecord]) -> str | None:
        """None when record is to be ended as this server's; else why it is spared."""
        if not self.judges:
            return None
        current, whose, seen = record, 'it carries', set()
        for dummy in range(self.MAX_DEPTH):
            verdict = self._verdict(current, whose)
            if verdict is not None:
                return verdict or None
            seen.add(current.pid)
            parent = by_pid.get(current.ppid)
            if parent is None or parent.pid in seen or parent.pid <= 1:
                break
            current, whose = parent, 'its parent %d carries' % parent.pid
        if self.neighbours:
            return ('nothing it or its parents carry says whose it is (no --port, no marks in its environment, no '
                    'unit of a server), and the neighbour server(s) %s run on this machine: it may be theirs'
                    % ', '.join(neighbour.describe() for neighbour in self.neighbours))
        return None

    def sort(self, matches: list[ProcessRecord],
             listing: list[ProcessRecord]) -> tuple[list[ProcessRecord], list[dict[str, Any]]]:
        """(the matches to end, the spared ones as {pid, cmdline, why}); listing gives their parents."""
        by_pid = {record.pid: record for record in listing}
        targets, spared = [], []
        for record in matches:
            why = self.why_spared(record, by_pid)
            if why is None:
                targets.append(record)
            else:
                spared.append({'pid': record.pid, 'cmdline': record.cmdline, 'why': why})
        return targets, spared


def merge_spared(spared: list[dict[str, Any]], more: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """spared with the entries of more whose PID it does not list yet (a rescan sees the same neighbour again)."""
    listed = {entry['pid'] for entry in spared}
    spared.extend(entry for entry in more if entry['pid'] not in listed)
    return spared


def killed_entry(record: ProcessRecord, signame: str) -> dict[str, Any]:
    return {'pid': record.pid, 'cmdline': record.cmdline, 'signal': signame}


def planned_kills(targets: list[ProcessRecord], term_timeout: float) -> list[dict[str, Any]]:
    """What check mode reports: each target with the first signal terminate() would send."""
    signame = 'KILL' if term_timeout <= 0 else 'TERM'
    return [killed_entry(record, signame) for record in targets]


def signalled_summary(killed: list[Any]) -> str:
    """What a failure message says was already sent, from killed entries."""
    if not killed:
        return 'nothing was signalled'
    return 'already signalled: %s' % ', '.join('pid %d (SIG%s)' % (entry['pid'], entry['signal'])
                                               for entry in killed)


class TerminationOutcome:
    def __init__(self, killed: list[Any], remaining: list[Any]) -> None:
        self.killed = killed
        self.remaining = remaining


class Termination:
    """TERM, wait up to term_timeout, KILL the survivors, wait up to kill_timeout.

    Every signalled process is tracked by PID and start time until it is gone,
    so one that changes its command line on SIGTERM still gets SIGKILL.

    With ``rescan`` (a function from a fresh ``source.list()`` to the records
    that match now), every poll lists again and treats new matches (children
    forked during shutdown, a respawn) as targets of the current round, and the
    outcome's ``remaining`` comes from a final listing: any match still there,
    signalled or not, is a survivor. Without it, only the given targets are
    followed (gpu_release: its targets are the holders of the device files).

    ``killed`` is filled as signals go out, so a caller that catches an error
    half way (a listing that failed or timed out) can still say what was sent.
    """

    def __init__(self, source: ProcessSource, term_timeout: float, kill_timeout: float = 10.0,
                 rescan: Callable | None = None, clock: Callable = time.monotonic,
                 sleep: Callable = time.sleep) -> None:
        self.source = source
        self.term_timeout = term_timeout
        self.kill_timeout = kill_timeout
        self.rescan = rescan
        self.clock = clock
        self.sleep = sleep
        self.tracked = {}      # key -> record as last seen
        self.last_signal = {}  # key -> 'TERM' or 'KILL'
        self.order = []        # keys in the order they were first signalled

    @property
    def killed(self) -> list[Any]:
        return [killed_entry(self.tracked[key], self.last_signal[key]) for key in self.order]

    def _send(self, records: list[Any], signame: str) -> None:
        if not records:
            return
        sent = self.source.signal(records, signame)
        # A source that does not say whom it reached is taken to have reached all of them.
        for record in (records if sent is None else sent):
            if record.key not in self.last_signal:
                self.order.append(record.key)
            self.tracked[record.key] = record
            self.last_signal[record.key] = signame

    def _read(self, signame: str) -> tuple[list[Any], list[Any]]:
        """(tracked processes still alive, matches nobody signalled yet); the latter get signame now."""
        if self.rescan is None:
            return self.source.alive([self.tracked[key] for key in self.order]), []
        listing = [record for record in self.source.list() if not record.is_zombie]
        alive = [record for record in listing
                 if any(self.tracked[key].same_process(record) for key in self.order)]
        fresh = [record for record in self.rescan(listing)
                 if not any(self.tracked[key].same_process(record) for key in self.order)]
        self._send(fresh, signame)
        return alive, fresh

    def _round(self, targets: list[ProcessRecord], signame: str, timeout: float) -> list[Any]:
        self._send(targets, signame)
        # A source says how often it is cheap to ask (/proc: often; a pct exec each time: less).
        reading = poll_until(lambda: self._read(signame), lambda state: not state[0] and not state[1], timeout,
                             first_interval=0.02, max_interval=getattr(self.source, 'poll_max_interval', 0.5),
                             clock=self.clock, sleep=self.sleep)
        alive, fresh = reading
        return alive + fresh

    def run(self, targets: list[Any]) -> TerminationOutcome:
        if not targets and self.rescan is None:
            return TerminationOutcome([], [])
        survivors = list(targets)
        if self.term_timeout > 0:
            survivors = self._round(survivors, 'TERM', self.term_timeout)
            if not survivors:
                return TerminationOutcome(self.killed, [])
        survivors = self._round(survivors, 'KILL', self.kill_timeout)
        if survivors and self.rescan is not None:
            # The last poll may have signalled newcomers; judge on one more listing.
            survivors = self._final_survivors()
        return TerminationOutcome(self.killed, survivors)

    def _final_survivors(self) -> list[ProcessRecord]:
        listing = [record for record in self.source.list() if not record.is_zombie]
        matches = {record.pid: record for record in self.rescan(listing)}
        for record in listing:
            if any(self.tracked[key].same_process(record) for key in self.order):
                matches[record.pid] = record
        return [matches[pid] for pid in sorted(matches)]


def terminate(source: ProcessSource, targets: list[ProcessRecord], term_timeout: float, kill_timeout: float = 10.0,
              rescan: Callable | None = None, clock: Callable = time.monotonic,
              sleep: Callable = time.sleep) -> TerminationOutcome:
    """SIGTERM the targets, wait up to term_timeout, SIGKILL survivors, wait up to kill_timeout.

    Waits poll rather than sleep a fixed time: a GPU holder killed with SIGKILL
    is gone in well under a second, a draining server may need all of
    term_timeout. Returns who got which last signal and who is still alive.
    See Termination for ``rescan``.
    """
    return Termination(source, term_timeout, kill_timeout, rescan, clock, sleep).run(targets)


def nothing_awaited() -> dict[str, Any]:
    """The awaited report when there was nothing to wait for (the same keys on every run)."""
    return {'pids': [], 'waited_s': 0.0, 'still_running': [], 'gone_at': None}


class Awaited:
    """What await_exit found: its report, who got SIGKILL after the bound, and who survived even that."""

    def __init__(self, report: dict[str, Any], killed: list[dict[str, Any]] | tuple[()] = (),
                 remaining: tuple[()] | list[ProcessRecord] = ()) -> None:
        self.report = report
        self.killed = list(killed)
        self.remaining = list(remaining)

    def failure(self) -> str | None:
        """Why the awaiting step must fail (a process of the server survived SIGKILL), or None."""
        if not self.remaining:
            return None
        return '%d process(es) of the stopping server survived SIGKILL: %s' % (
            len(self.remaining), '; '.join(record.describe() for record in self.remaining))


def await_exit(source: ProcessSource, pids: list[int], timeout: float, kill_timeout: float = 10.0,
               clock: Callable = time.monotonic, sleep: Callable = time.sleep) -> Awaited:
    """Wait up to timeout for the processes with these PIDs, as listed now, to exit on their own; SIGKILL the rest.

    For a step that follows a stop which did not wait (sglang_server wait=false): the server drains
    while this step starts up, and nothing of it is signalled before its bound has passed; then what is
    still there gets SIGKILL at once (it had its SIGTERM and its term_timeout, as a stop that waits
    gives it). Processes are followed by PID and start time, so a PID reused meanwhile is not waited
    on. The report: pids (those asked for), waited_s, still_running (the PIDs alive when the time was
    up) and gone_at (when none of them was running any more, seconds since the epoch; None when nothing
    was awaited or some survived SIGKILL).
    """
    wanted = {int(pid) for pid in pids}
    if not wanted:
        return Awaited(nothing_awaited())
    started = clock()
    records = [record for record in source.list() if record.pid in wanted and not record.is_zombie]
    alive = records
    if records:
        # A source says how often it is cheap to ask (/proc: often; a pct exec each time: less).
        alive = poll_until(lambda: source.alive(records), lambda now: not now, timeout, first_interval=0.02,
                           max_interval=getattr(source, 'poll_max_interval', 0.5), clock=clock, sleep=sleep)
    report = {'pids': sorted(wanted), 'waited_s': round(clock() - started, 3),
              'still_running': sorted(record.pid for record in alive), 'gone_at': None}
    outcome = terminate(source, alive, 0, kill_timeout, clock=clock, sleep=sleep) if alive else None
    if outcome is None or not outcome.remaining:
        # Host clock, for the report's stop phase (from the stop's stopped_at).
        report['gone_at'] = time.time()
    return Awaited(report, outcome.killed if outcome else (), outcome.remaining if outcome else ())
