# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE ``pct``: argv builders, output parsers and the container process source.

Every command is an argv list handed to run_command: ``pct exec VMID -- CMD ARGS``
runs CMD inside the container without any shell, so nothing typed by the
operator is ever re-parsed by bash, ssh or pct.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.sglang.plugins.module_utils._processes import (
    ProcessRecord,
    ProcessSourceError,
)

# -ww: never cut the command line, patterns must see all of it.
PS_ARGS = ['ps', '-e', '-ww', '-o', 'pid=,ppid=,stat=,args=']


class PctCommand(object):
    """argv builder for one pct binary and one container."""

    def __init__(self, pct_path, vmid):
        self.pct_path = pct_path
        self.vmid = int(vmid)

    def status(self):
        return [self.pct_path, 'status', str(self.vmid)]

    def exec_(self, argv):
        return [self.pct_path, 'exec', str(self.vmid), '--'] + list(argv)

    def list_processes(self):
        return self.exec_(PS_ARGS)

    def kill(self, signame, pids):
        return self.exec_(['kill', '-s', signame] + [str(pid) for pid in pids])


def parse_status(stdout):
    """'status: running' -> 'running'. Returns None for output pct never prints."""
    for line in stdout.splitlines():
        key, sep, value = line.partition(':')
        if sep and key.strip() == 'status':
            return value.strip()
    return None


def parse_ps(stdout):
    """Records from ``ps -e -ww -o pid=,ppid=,stat=,args=`` output."""
    records = []
    for line in stdout.splitlines():
        fields = line.split(None, 3)
        if not fields:
            continue
        if len(fields) < 3 or not fields[0].isdigit() or not fields[1].isdigit():
            raise ProcessSourceError('unexpected ps output line: %r' % line)
        cmdline = fields[3].strip() if len(fields) == 4 else ''
        records.append(ProcessRecord(fields[0], fields[1], fields[2], cmdline))
    return records


class ContainerProcesses(object):
    """Processes inside one LXC container, seen and signalled through ``pct exec``."""

    def __init__(self, run_command, pct_command):
        self.run_command = run_command
        self.pct = pct_command
        self.commands = []

    def run(self, argv):
        self.commands.append(argv)
        return self.run_command(argv, environ_update={'LANG': 'C', 'LC_ALL': 'C'})

    def list(self):
        argv = self.pct.list_processes()
        rc, stdout, stderr = self.run(argv)
        if rc != 0:
            raise ProcessSourceError('listing processes in container %d failed (rc %d): %s'
                                     % (self.pct.vmid, rc, (stderr or stdout).strip()))
        return parse_ps(stdout)

    def signal(self, records, signame):
        if records:
            # kill exits 1 when one PID already exited; alive() is the judge.
            self.run(self.pct.kill(signame, [record.pid for record in records]))

    def alive(self, records):
        current = dict((record.pid, record) for record in self.list())
        still = []
        for record in records:
            now = current.get(record.pid)
            if now is not None and now.same_process(record) and not now.is_zombie:
                still.append(now)
        return still
