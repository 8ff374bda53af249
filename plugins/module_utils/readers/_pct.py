# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE ``pct``: argv builders, output parsers and the container process source.

Every command is an argv list: ``pct exec VMID -- /bin/sh -c SCRIPT NAME ARGS``
runs a fixed script inside the container, and everything variable (PIDs, the
signal name) travels as separate arguments, so nothing typed by the operator is
re-parsed by bash, ssh or pct.

Why the listing reads /proc with /bin/sh inside the container, and not ``ps``
and not the container's cgroup from the node:
- ``ps`` is procps: busybox ``ps`` (Alpine and other minimal templates) has no
  ``-ww``, and some templates have no ``ps`` at all. /bin/sh and ``tr`` exist in
  every template (dash, bash or busybox), and /proc is the kernel's own answer.
- From the node, the cgroup holding a container differs between Proxmox VE
  releases and cgroup v1/v2 (lxc/VMID, lxc/VMID/ns, lxc.payload.VMID), and its
  PIDs are host PIDs an operator never sees in the container. Inside, PIDs are
  the container's own, and PID 1 is its init.
- The signalling script re-reads each process's start time and sends the signal
  in the same shell, inside the container, so a PID reused between listing and
  signalling is never hit, with no second round trip in between.
The scripts print their own PID first; the module never selects that shell or
anything it started, and never PID 1.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    ProcessMarks,
    ProcessRecord,
    ProcessSourceError,
    marks_from,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandRunner, CommandResult

# One line per process: "proc PID PPID STATE STARTTIME CMDLINE", NULs and newlines of the
# command line turned into spaces. Field 22 of /proc/PID/stat is the start time; the fields
# after "comm)" start at field 3, so it is ${20} there (comm may hold spaces and ')').
# With the argument "users" (a dry run's listing), also "uid PID EUID" after each process and "account UID NAME"
# for each line of the container's /etc/passwd: its uids are the container's own, which the node's accounts do
# not name. Only then: the listing is polled while a server drains, and each status read costs time there.
# With the argument "marks" (a kill told whose server it ends, issue 44), also "env PID NAME=VALUE" for the
# gpuops marks in each process's environment (no other variable: an environment may hold secrets) and
# "cgroup PID PATH" for each line of /proc/PID/cgroup that names a systemd service.
LIST_SCRIPT = r'''echo "self $$"
users= marks=
for option in "$@"; do
  case $option in users) users=users ;; marks) marks=marks ;; esac
done
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  IFS= read -r stat < "$d/stat" || continue
  set -- ${stat##*) }
  [ $# -ge 20 ] || continue
  cmd=$(tr '\000\n' '  ' < "$d/cmdline") || continue
  printf 'proc %s %s %s %s %s\n' "$pid" "$2" "$1" "${20}" "$cmd"
  if [ "$users" = users ]; then
    while read -r key real effective rest; do
      if [ "$key" = Uid: ]; then echo "uid $pid $effective"; break; fi
    done < "$d/status"
  fi
  if [ "$marks" = marks ]; then
    tr '\000\n' '\n ' < "$d/environ" | while IFS= read -r entry; do
      case $entry in GPUOPS_SGLANG_SERVICE=*|GPUOPS_SGLANG_LAUNCH_FILE=*) echo "env $pid $entry" ;; esac
    done
    while IFS= read -r line; do
      case $line in *.service|*.service/*) echo "cgroup $pid $line" ;; esac
    done < "$d/cgroup"
  fi
done 2>/dev/null
if [ "$users" = users ]; then
  while IFS=: read -r name password uid rest; do echo "account $uid $name"; done < /etc/passwd
fi 2>/dev/null
echo end
'''

# Arguments: SIGNAL PID:STARTTIME... Prints "sent PID", "gone PID" (exited, or the PID now
# belongs to another process) or "refused PID" (PID 1 or this shell) for each, then "end".
SIGNAL_SCRIPT = r'''sig=$1
shift
for target in "$@"; do
  pid=${target%%:*}
  want=${target#*:}
  if [ "$pid" = 1 ] || [ "$pid" = "$$" ]; then echo "refused $pid"; continue; fi
  if ! IFS= read -r stat < "/proc/$pid/stat"; then echo "gone $pid"; continue; fi
  set -- ${stat##*) }
  if [ "${20}" != "$want" ]; then echo "gone $pid"; continue; fi
  if kill -s "$sig" "$pid"; then echo "sent $pid"; else echo "gone $pid"; fi
done 2>/dev/null
echo end
'''

LIST_NAME = 'gpuops-sglang-list'
SIGNAL_NAME = 'gpuops-sglang-signal'
CONTAINER_INIT_PID = 1


class PctCommand:
    """argv builder for one pct binary and one container."""

    def __init__(self, pct_path: str, vmid: int) -> None:
        self.pct_path = pct_path
        self.vmid = int(vmid)

    def status(self) -> list[str]:
        return [self.pct_path, 'status', str(self.vmid)]

    def exec_(self, argv: list[str]) -> list[str]:
        return [self.pct_path, 'exec', str(self.vmid), '--'] + list(argv)

    def list_processes(self, users: bool = False, marks: bool = False) -> list[str]:
        return self.exec_(['/bin/sh', '-c', LIST_SCRIPT, LIST_NAME] + (['users'] if users else [])
                          + (['marks'] if marks else []))

    def signal(self, signame: str, records: list[ProcessRecord]) -> list[str]:
        return self.exec_(['/bin/sh', '-c', SIGNAL_SCRIPT, SIGNAL_NAME, signame] +
                          ['%d:%d' % (record.pid, record.start_time) for record in records])


def short_argv(argv: list[str]) -> str:
    """The argv for a message, with the inline scripts shown by name."""
    return ' '.join('<script>' if '\n' in arg else arg for arg in argv)


def parse_status(stdout: str) -> str | None:
    """'status: running' -> 'running'. Returns None for output pct never prints."""
    for line in stdout.splitlines():
        key, sep, value = line.partition(':')
        if sep and key.strip() == 'status':
            return value.strip()
    return None


def parse_listing(stdout: str) -> tuple[int, list[ProcessRecord]]:
    """(PID of the listing shell, records) from LIST_SCRIPT's output; ProcessSourceError when incomplete."""
    self_pid = None
    records = []
    complete = False
    for line in stdout.split('\n'):
        if line.startswith('self ') and line[5:].strip().isdigit():
            self_pid = int(line[5:])
        elif line.startswith('proc '):
            fields = line[5:].split(' ', 4)
            if len(fields) < 4 or not all(field.isdigit() for field in (fields[0], fields[1], fields[3])):
                raise ProcessSourceError('unexpected line in the process listing: %r' % line)
            cmdline = fields[4].strip() if len(fields) == 5 else ''
            records.append(ProcessRecord(fields[0], fields[1], fields[2], cmdline, start_time=fields[3]))
        elif line.strip() == 'end':
            complete = True
    if self_pid is None or not complete:
        raise ProcessSourceError('the process listing was cut short or is not from the listing script')
    if not any(record.pid == self_pid for record in records):
        raise ProcessSourceError('the process listing does not show its own shell (pid %d): /proc in the '
                                 'container is missing or not the container\'s own' % self_pid)
    return self_pid, records


def parse_users(stdout: str) -> dict[str, Any]:
    """{pid: the name of its effective user} from the "uid" and "account" lines of LIST_SCRIPT's output with
    "users" (the uid itself where the container has no account for it)."""
    uids, accounts = {}, {}
    for line in stdout.split('\n'):
        fields = line.split(' ')
        if len(fields) == 3 and fields[0] == 'uid' and fields[1].isdigit() and fields[2].isdigit():
            uids[int(fields[1])] = fields[2]
        elif len(fields) == 3 and fields[0] == 'account' and fields[1].isdigit():
            accounts.setdefault(fields[1], fields[2])
    return {pid: accounts.get(uid, uid) for pid, uid in uids.items()}


def parse_marks(stdout: str) -> dict[int, ProcessMarks]:
    """{pid: ProcessMarks} from the "env" and "cgroup" lines of LIST_SCRIPT's output with "marks"."""
    environment, cgroups = {}, {}
    for line in stdout.split('\n'):
        word, dummy, rest = line.partition(' ')
        pid, dummy, value = rest.partition(' ')
        if word in ('env', 'cgroup') and pid.isdigit() and value:
            (environment if word == 'env' else cgroups).setdefault(int(pid), []).append(value)
    return {pid: marks_from(environment.get(pid, []), cgroups.get(pid, [])) for pid in set(environment) | set(cgroups)}


def own_processes(self_pid: int, records: list[ProcessRecord]) -> set[int]:
    """The listing shell and every process below it (its command substitutions)."""
    children = {}
    for record in records:
        children.setdefault(record.ppid, []).append(record.pid)
    own, todo = set(), [self_pid]
    while todo:
        pid = todo.pop()
        if pid not in own:
            own.add(pid)
            todo.extend(children.get(pid, []))
    return own


def parse_signal_output(stdout: str) -> dict[int, str]:
    """{pid: 'sent' | 'gone' | 'refused'}; ProcessSourceError when the script did not finish."""
    outcome = {}
    complete = False
    for line in stdout.splitlines():
        word, sep, pid = line.strip().partition(' ')
        if sep and word in ('sent', 'gone', 'refused') and pid.isdigit():
            outcome[int(pid)] = word
        elif word == 'end':
            complete = True
    if not complete:
        raise ProcessSourceError('the signalling script did not finish')
    return outcome


class ContainerProcesses:
    """Processes inside one LXC container, seen and signalled through ``pct exec``.

    ``runner`` is a _command.CommandRunner: every pct call has a deadline.
    ``list()`` leaves out the listing shell itself; PID 1 stays listed (it may
    match), and is never signalled (see PROTECTED).
    """

    PROTECTED = frozenset([CONTAINER_INIT_PID])
    # Each reading is one pct exec (lxc-attach; about 35 ms in the lab's simulator): every 0.1 s at most
    # while a draining server is awaited, so its exit is seen soon after and the node is not flooded.
    poll_max_interval = 0.1

    def __init__(self, runner: CommandRunner, pct_command: PctCommand, with_users: bool = False,
                 with_marks: bool = False) -> None:
        self.runner = runner
        self.pct = pct_command
        # A dry run's listing also names each process's user (users, by PID, from the last listing).
        self.with_users = with_users
        self.users = {}
        # A kill told whose server it ends reads what each process carries of its server (ServerOwnership).
        self.with_marks = with_marks

    @property
    def vmid(self) -> int:
        return self.pct.vmid

    def _fail(self, doing: str, result: CommandResult, hint: str = '') -> NoReturn:
        if result.timed_out:
            why = '`%s` timed out after %gs and was killed' % (short_argv(result.argv), result.timeout)
        else:
            why = '`%s` failed (rc %d): %s' % (short_argv(result.argv), result.rc, result.output or 'no output')
        raise ProcessSourceError('%s in container %d failed: %s%s' % (doing, self.vmid, why, hint))

    def list(self) -> list[ProcessRecord]:
        result = self.runner.run(self.pct.list_processes(self.with_users, self.with_marks))
        if result.timed_out or result.rc != 0:
            self._fail('listing processes', result,
                       '' if result.timed_out else '. The listing runs /bin/sh and tr inside the container and '
                                                   'reads its /proc.')
        try:
            self_pid, records = parse_listing(result.stdout)
        except ProcessSourceError as exc:
            raise ProcessSourceError('listing processes in container %d failed: %s; output: %r'
                                     % (self.vmid, exc, result.output[-400:]))
        own = own_processes(self_pid, records)
        self.users = parse_users(result.stdout) if self.with_users else {}
        if self.with_marks:
            marks = parse_marks(result.stdout)
            for record in records:
                record.marks = marks.get(record.pid, ProcessMarks())
        return [record for record in records if record.pid not in own]

    def signal(self, records: list[ProcessRecord], signame: str) -> list[ProcessRecord]:
        records = [record for record in records if record.pid not in self.PROTECTED]
        if not records:
            return []
        result = self.runner.run(self.pct.signal(signame, records))
        if result.timed_out or result.rc != 0:
            self._fail('sending SIG%s to pid(s) %s' % (signame, ', '.join(str(r.pid) for r in records)), result,
                       '; whether the signal reached them is unknown')
        try:
            outcome = parse_signal_output(result.stdout)
        except ProcessSourceError as exc:
            raise ProcessSourceError('sending SIG%s in container %d: %s; output: %r'
                                     % (signame, self.vmid, exc, result.output[-400:]))
        return [record for record in records if outcome.get(record.pid) == 'sent']

    def alive(self, records: list[ProcessRecord]) -> list[ProcessRecord]:
        current = self.list()
        return [now for now in current if not now.is_zombie and any(record.same_process(now) for record in records)]
