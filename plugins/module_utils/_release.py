# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_release's domain: which holders of the NVIDIA devices to stop, and what a failed release says.

Domain layer, over the /proc reader (_procfs) and the nvidia-smi proof (_nvidia).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpuops.sglang.plugins.module_utils._nvidia import format_gpu_table, unreadable
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import signalled_summary
from ansible_collections.gpuops.sglang.plugins.module_utils._procfs import parse_stat, read_proc_record


def excluded_by(record, excludes):
    names = [record.name, os.path.basename(record.cmdline.split(' ', 1)[0])]
    return any(pattern.search(name) for pattern in excludes for name in names)


def classify_holders(holders, excludes, guarded):
    """Split holders into those to stop and those left alone (with why)."""
    targets, left_alone = [], []
    for pid in sorted(holders):
        record = read_proc_record(pid)
        if record is None or record.is_zombie:
            continue
        if pid in guarded:
            reason = 'self/ancestor'
        elif excluded_by(record, excludes):
            reason = 'exclude'
        else:
            targets.append(record)
            continue
        left_alone.append({'pid': pid, 'cmdline': record.cmdline, 'devices': holders[pid], 'reason': reason})
    return targets, left_alone


def not_free_message(proof, timeout, killed, compute_apps, still_holding):
    """Why the memory was not proven free within timeout: per-GPU table, what was signalled, what holds on."""
    gpus = proof.gpus
    sick = unreadable(gpus)
    busy = proof.busy()
    problems = []
    if busy:
        problems.append('did not drain to <= %d MiB on GPU(s) %s' % (
            proof.max_used_mib, ', '.join(str(gpu['index']) for gpu in busy)))
    if sick or proof.last_error:
        problems.append('could not be read on GPU(s) %s' % ', '.join(
            [str(gpu['index']) if gpu['index'] is not None else '?' for gpu in sick] or ['all']))
    missing = proof.missing()
    if missing:
        problems.append('is not listed any more for GPU(s) %s' % ', '.join(str(index) for index in missing))
    return ('GPU memory %s within %.1fs; %s.\n%s\n%s'
            'compute apps: %s; processes holding the devices now: %s. With no process left, memory that stays '
            'used or a GPU that cannot be read is a driver-level problem: reset the GPU or reboot.'
            % (' and '.join(problems), timeout, signalled_summary(killed),
               format_gpu_table(gpus, proof.max_used_mib, proof.expected),
               'last nvidia-smi error: %s\n' % proof.last_error if proof.last_error else '',
               compute_apps or 'none', still_holding or 'none'))


class Timeline(object):
    """What happened when during a release, for RV(timeline): signals, /proc polls, nvidia-smi calls.

    Every entry is kept against one monotonic clock and reported as seconds from the first signal (the
    start of ``elapsed``), so a slow release shows where its time went: in the holders' exit, in one
    slow nvidia-smi call, or in the wait between two readings. /proc polls are many and cheap: only
    those whose count of live holders changed are kept, each with the number of polls so far.
    """

    LIMIT = 200

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.entries = []
        self.dropped = 0
        # Set when the first signal goes out; until then entries count from the first entry.
        self.origin = None

    def add(self, event, detail='', at=None, took=None):
        if len(self.entries) >= self.LIMIT:
            self.dropped += 1
            return
        self.entries.append((self.clock() if at is None else at, event, took, detail))

    def report(self):
        """Entries as dicts, ``at`` in seconds from the origin (negative before it), 3 decimals."""
        origin = self.origin
        if origin is None:
            origin = min(entry[0] for entry in self.entries) if self.entries else 0.0
        rows = [{'at': round(at - origin, 3), 'event': event, 'took': None if took is None else round(took, 3),
                 'detail': detail} for at, event, took, detail in self.entries]
        if self.dropped:
            rows.append({'at': rows[-1]['at'], 'event': 'truncated', 'took': None,
                         'detail': '%d later entries left out' % self.dropped})
        return rows


class TracedProcesses(object):
    """A process source (same verbs) that notes signals and changes in who is alive on a Timeline."""

    def __init__(self, source, timeline):
        self.source = source
        self.timeline = timeline
        self.poll_max_interval = getattr(source, 'poll_max_interval', 0.5)
        self.polls = 0
        self.last_counts = None
        self.last_poll = None

    def __getattr__(self, name):
        return getattr(self.source, name)

    def signal(self, records, signame):
        sent = self.source.signal(records, signame)
        self.timeline.add('signal', 'SIG%s to pid %s' % (signame, ', '.join(
            str(record.pid) for record in (records if sent is None else sent)) or 'none (all gone)'))
        return sent

    def alive(self, records):
        started = self.timeline.clock()
        alive = self.source.alive(records)
        self.polls += 1
        counts = (len(alive), len(records))
        if counts != self.last_counts:
            self.last_counts = counts
            self.timeline.add('holders gone' if not alive else 'poll', '%d of %d alive (/proc poll %d%s)' % (
                len(alive), len(records), self.polls, '' if self.last_poll is None else
                ', the one before %.3f s earlier' % (started - self.last_poll)), at=started,
                took=self.timeline.clock() - started)
        self.last_poll = started
        return alive


class TracedReader(object):
    """A GPU reader (same verbs) that notes each nvidia-smi call, its duration and what it read."""

    source_name = 'nvidia-smi'

    def __init__(self, reader, timeline):
        self.reader = reader
        self.timeline = timeline

    def __getattr__(self, name):
        return getattr(self.reader, name)

    def gpus(self):
        started = self.timeline.clock()
        try:
            gpus = self.reader.gpus()
        except Exception as exc:
            self.timeline.add('gpu reading', '%s failed: %s' % (self.source_name, exc), at=started,
                              took=self.timeline.clock() - started)
            raise
        self.timeline.add('gpu reading', self.source_name + ': ' + ', '.join('GPU %s %s MiB' % (
            '?' if gpu['index'] is None else gpu['index'],
            '?' if gpu['memory_used_mib'] is None else gpu['memory_used_mib']) for gpu in gpus),
            at=started, took=self.timeline.clock() - started)
        return gpus


def process_started_at(clock=time.monotonic, stat_path='/proc/self/stat'):
    """When this process started, on clock's scale (to 1/CLK_TCK s), or None where it cannot be told.

    /proc/PID/stat counts the start in clock ticks since boot (CLOCK_BOOTTIME): the module's own
    start-up (the interpreter, Ansiballz unpacking, imports) shows as the gap to ``module start``.
    """
    boottime = getattr(time, 'CLOCK_BOOTTIME', None)
    if boottime is None:
        return None
    try:
        with open(stat_path, 'rb') as stat_file:
            stat = stat_file.read().decode('utf-8', 'replace')
        ticks = parse_stat(stat)[3]
        since_boot = time.clock_gettime(boottime)
        now = clock()
        return now - (since_boot - ticks / float(os.sysconf('SC_CLK_TCK')))
    except (IOError, OSError, IndexError, ValueError):
        return None
