# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_release's domain: which holders of the NVIDIA devices to stop, and what a failed release says.

Domain layer, over the /proc reader (_procfs) and the nvidia-smi proof (_nvidia).
"""

from __future__ import annotations

import math
import os
import time
from re import Pattern
from typing import Any, Callable
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import FreeMemoryProof, GpuReader
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import LocalProcesses

try:
    import pynvml
except ImportError:
    # nvidia-ml-py is optional: without it the memory is read with nvidia-smi.
    pynvml = None

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import BoundedCall, CommandError
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import NvidiaSmiError, format_gpu_table, unreadable
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import ProcessRecord, is_excluded_daemon, signalled_summary
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import parse_stat, read_identity, read_proc_record


def classify_holders(holders: dict[str, Any], excludes: list[Pattern], guarded: set[int],
                     proc_root: str = '/proc') -> tuple[list[Any], list[Any]]:
    """Split holders into those to stop and those left alone (with why)."""
    targets, left_alone = [], []
    for pid in sorted(holders):
        record = read_proc_record(pid, proc_root)
        if record is None or record.is_zombie:
            continue
        executable, uids = read_identity(pid, proc_root)
        if pid in guarded:
            reason = 'self/ancestor'
        elif is_excluded_daemon(executable, uids, excludes):
            reason = 'exclude'
        else:
            targets.append(record)
            continue
        left_alone.append({'pid': pid, 'cmdline': record.cmdline, 'executable': executable, 'devices': holders[pid],
                           'reason': reason})
    return targets, left_alone


def not_free_message(proof: FreeMemoryProof, timeout: float, killed: list[Any], compute_apps: list[Any],
                     still_holding: list[Any]) -> str:
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
            'compute apps: %s; processes holding the devices now: %s. %sWith no process left, memory that stays '
            'used or a GPU that cannot be read is a driver-level problem: reset the GPU or reboot.'
            % (' and '.join(problems), timeout, signalled_summary(killed),
               format_gpu_table(gpus, proof.max_used_mib, proof.expected),
               'last nvidia-smi error: %s\n' % proof.last_error if proof.last_error else '',
               compute_apps or 'none', still_holding or 'none',
               only_threshold_hint(proof, busy, compute_apps, still_holding) if not (sick or missing) else ''))


def only_threshold_hint(proof: FreeMemoryProof, busy: list[dict[str, Any]], compute_apps: list[Any],
                        still_holding: list[Any]) -> str:
    """When nothing but the threshold failed (no compute app, no holder, every GPU read): the readings against
    it, and the one setting to look at first, as some GPUs idle above 0 MiB (an idle H100 reads about 4)."""
    if not busy or compute_apps or still_holding:
        return ''
    return ('Only the threshold failed: %s with no process left, above max_used_mib %d MiB (the role\'s '
            'sglang_gpu_max_used_mib). If that is the idle reading of these GPUs, set the threshold above it, '
            'well below one CUDA context (529 MiB measured on an H100). '
            % (', '.join('GPU %s reads %s MiB' % (gpu['index'], gpu['memory_used_mib']) for gpu in busy),
               proof.max_used_mib))


class Timeline:
    """What happened when during a release, for RV(timeline): signals, /proc polls, nvidia-smi calls.

    Every entry is kept against one monotonic clock and reported as seconds from the first signal (the
    start of ``elapsed``), so a slow release shows where its time went: in the holders' exit, in one
    slow nvidia-smi call, or in the wait between two readings. /proc polls are many and cheap: only
    those whose count of live holders changed are kept, each with the number of polls so far.
    """

    LIMIT = 200

    def __init__(self, clock: Callable = time.monotonic) -> None:
        self.clock = clock
        self.entries = []
        self.dropped = 0
        # Set when the first signal goes out; until then entries count from the first entry.
        self.origin = None

    def add(self, event: str, detail: str = '', at: float | None = None, took: float | None = None) -> None:
        if len(self.entries) >= self.LIMIT:
            self.dropped += 1
            return
        self.entries.append((self.clock() if at is None else at, event, took, detail))

    def report(self) -> list[dict[str, Any]]:
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


class TracedProcesses:
    """A process source (same verbs) that notes signals and changes in who is alive on a Timeline."""

    def __init__(self, source: LocalProcesses, timeline: Timeline) -> None:
        self.source = source
        self.timeline = timeline
        self.poll_max_interval = getattr(source, 'poll_max_interval', 0.5)
        self.polls = 0
        self.last_counts = None
        self.last_poll = None

    def __getattr__(self, name: str) -> Callable:
        return getattr(self.source, name)

    def signal(self, records: list[ProcessRecord], signame: str) -> list[ProcessRecord]:
        sent = self.source.signal(records, signame)
        self.timeline.add('signal', 'SIG%s to pid %s' % (signame, ', '.join(
            str(record.pid) for record in (records if sent is None else sent)) or 'none (all gone)'))
        return sent

    def alive(self, records: list[ProcessRecord]) -> list[ProcessRecord]:
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


class TracedReader:
    """A GPU reader (same verbs) that notes each nvidia-smi call, its duration and what it read."""

    def __init__(self, reader: MemoryReader, timeline: Timeline) -> None:
        self.reader = reader
        self.timeline = timeline
        self.source_name = getattr(reader, 'source_name', 'nvidia-smi')

    def __getattr__(self, name: str) -> tuple[float, float] | Callable:
        return getattr(self.reader, name)

    def gpus(self) -> list[dict[str, Any]]:
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


def process_started_at(clock: Callable = time.monotonic, stat_path: str = '/proc/self/stat') -> float | None:
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
    except (OSError, IndexError, ValueError):
        return None


MIB = 1024 * 1024


class NvmlUnavailable(Exception):
    """NVML cannot be used here (nvidia-ml-py missing or too old, or nvmlInit failed)."""


def _text(value: bytes | str | None) -> str | None:
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


class NvmlReader:
    """GPU records read in-process through NVML (nvidia-ml-py), the same records as GpuReader's.

    Why: on an H200 an nvidia-smi reading started while the driver was freeing a killed holder's
    memory took 1.0 to 1.2 s instead of 0.03 to 0.15 s (4 releases in 60); NVML in-process
    costs no process start per reading. Memory is NVML's v2 memory info, never v1, which counted
    615 MiB of reserved memory on an idle H200 (nvidia-smi's memory.used excludes it too). Used
    memory is rounded up to whole MiB, so a GPU reads as at or under the threshold only when it is.
    Each call runs under ``timeout`` in a helper thread: a wedged driver hangs NVML as it hangs
    nvidia-smi, and the caller then gets CommandError as from a killed nvidia-smi.
    """

    source_name = 'NVML'
    # An NVML reading costs well under a millisecond: polling every 20 ms costs nothing.
    poll_intervals = (0.02, 0.02)

    def __init__(self, nvml: Any, timeout: float) -> None:
        self.nvml = nvml
        self.timeout = timeout

    @classmethod
    def open(cls, timeout: float, nvml: Any = None) -> NvmlReader:
        """A reader over an initialised NVML; NvmlUnavailable says why there is none."""
        nvml = pynvml if nvml is None else nvml
        if nvml is None:
            raise NvmlUnavailable('nvidia-ml-py (pynvml) is not installed for this Python')
        if not hasattr(nvml, 'nvmlMemory_v2'):
            raise NvmlUnavailable('nvidia-ml-py is too old for NVML v2 memory info (nvmlMemory_v2)')
        reader = cls(nvml, timeout)
        try:
            reader._call(nvml.nvmlInit, 'nvmlInit')
        except (CommandError, nvml.NVMLError) as exc:
            raise NvmlUnavailable('nvmlInit failed: %s' % exc)
        try:
            # A driver older than v2 memory info (R510) answers every v2 reading with an error: the wait would
            # never see a free GPU where nvidia-smi would, so such a driver is a reason for nvidia-smi instead.
            reader._call(reader._probe_v2, 'memory reading')
        except (CommandError, nvml.NVMLError) as exc:
            reader.close()
            raise NvmlUnavailable('NVML v2 memory info cannot be read: %s' % exc)
        return reader

    def _probe_v2(self) -> None:
        nvml = self.nvml
        if nvml.nvmlDeviceGetCount() > 0:
            nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0), version=nvml.nvmlMemory_v2)

    def _call(self, function: Callable, what: str) -> list[dict[str, Any]] | None:
        return BoundedCall(function, self.timeout, 'NVML %s' % what).wait()

    def _read_all(self) -> list[dict[str, Any]]:
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise NvidiaSmiError('NVML could not count the GPUs: %s' % exc)
        gpus = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            except nvml.NVMLError as exc:
                gpus.append({'index': index, 'uuid': None, 'memory_used_mib': None, 'memory_total_mib': None,
                             'error': 'NVML: %s' % exc})
                continue
            gpus.append({'index': index, 'uuid': uuid, 'memory_used_mib': int(math.ceil(memory.used / float(MIB))),
                         'memory_total_mib': int(memory.total // MIB), 'error': None})
        if not gpus:
            raise NvidiaSmiError('NVML listed no GPU')
        return gpus

    def gpus(self) -> list[dict[str, Any]]:
        """GPU records; NvidiaSmiError when NVML names no GPU; CommandError when a call hangs."""
        return self._call(self._read_all, 'memory reading')

    def close(self) -> None:
        try:
            self._call(self.nvml.nvmlShutdown, 'nvmlShutdown')
        except (CommandError, self.nvml.NVMLError):
            pass


class MemoryReader:
    """What gpu_release reads the memory with: NVML or nvidia-smi, and nvidia-smi for compute apps."""

    def __init__(self, gpus_reader: NvmlReader | GpuReader, smi_reader: GpuReader) -> None:
        self.gpus_reader = gpus_reader
        self.smi_reader = smi_reader
        self.source_name = gpus_reader.source_name
        self.poll_intervals = gpus_reader.poll_intervals

    def gpus(self) -> list[dict[str, Any]]:
        return self.gpus_reader.gpus()

    def compute_apps(self) -> list[Any]:
        if self.smi_reader is None:
            return [{'error': 'nvidia-smi was not found on PATH: no compute apps to show'}]
        return self.smi_reader.compute_apps()

    def cmd(self) -> list[Any]:
        """The nvidia-smi argv that read the memory; none when NVML did."""
        return [] if self.gpus_reader is not self.smi_reader else self.smi_reader.command.query_gpus()

    def close(self) -> None:
        if self.gpus_reader is not self.smi_reader:
            self.gpus_reader.close()


def choose_reader(choice: str, smi_reader: GpuReader | None, timeout: float,
                  nvml: Any = None) -> tuple[MemoryReader, str | None]:
    """(MemoryReader, why NVML is not used or None) for memory_reader auto, nvml or nvidia-smi.

    ``auto`` takes NVML where it works and nvidia-smi otherwise. Raises NvmlUnavailable for ``nvml``
    without NVML, and NvidiaSmiError for ``nvidia-smi`` (or ``auto`` without NVML) without nvidia-smi.
    """
    why = None
    if choice in ('auto', 'nvml'):
        try:
            return MemoryReader(NvmlReader.open(timeout, nvml), smi_reader), None
        except NvmlUnavailable as exc:
            if choice == 'nvml':
                raise
            why = str(exc)
    if smi_reader is None:
        raise NvidiaSmiError('nvidia-smi was not found on PATH%s; install the NVIDIA driver utilities or set the '
                             'nvidia_smi option' % ('' if why is None else ' and NVML cannot be used (%s)' % why))
    return MemoryReader(smi_reader, smi_reader), why
