# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_release's domain: which holders of the NVIDIA devices to stop, what a failed release says, and the release
itself (GpuRelease), which gpu_release runs and sglang_server's stop runs in the same process (its `release`
option) when nothing else must happen between the two: one module round trip less inside the outage.

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

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import BoundedCall, CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import (
    DRIVER_INFO,
    NVIDIA_DAEMON_EXCLUDES,
    NVIDIA_DEVICE_GLOBS,
    DeviceError,
    NvidiaSmiError,
    ScopeError,
    bus_key,
    expand_devices,
    format_gpu_table,
    gpu_entry_problems,
    read_driver_information,
    resolve_gpus,
    unreadable,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    ProcessRecord,
    Termination,
    await_exit,
    compile_patterns,
    is_excluded_daemon,
    nothing_awaited,
    planned_kills,
    signalled_summary,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import (
    described,
    gpu_minors,
    parse_stat,
    protected_pids,
    read_identity,
    read_proc_record,
)


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
                           'why': reason})
    return targets, left_alone


def not_free_message(proof: FreeMemoryProof, timeout: float, killed: list[Any], compute_apps: list[Any],
                     still_holding: list[Any], spared: list[dict[str, Any]] | tuple[()] = ()) -> str:
    """Why the memory was not proven free within timeout: per-GPU table, what was signalled, what holds on."""
    gpus = proof.covered()
    sick = unreadable(gpus)
    busy = proof.busy()
    problems = []
    if proof.processes is not None and proof.free():
        left = ', '.join('pid %s on %s' % (app['pid'], app['gpu_uuid']) for app in proof.apps_left or [])
        problems.append('read free but could not be proven free: %s' % (
            'the compute apps could not be listed (%s)' % proof.apps_error if proof.apps_error else
            'compute apps stayed on it (%s)' % left))
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
            'compute apps: %s; processes holding the devices now: %s. %s%sWith no process left, memory that stays '
            'used or a GPU that cannot be read is a driver-level problem: reset the GPU or reboot.'
            % (' and '.join(problems), timeout, signalled_summary(killed),
               format_gpu_table(gpus, proof.max_used_mib, proof.expected),
               'last nvidia-smi error: %s\n' % proof.last_error if proof.last_error else '',
               compute_apps or 'none', still_holding or 'none', spared_words(spared),
               only_threshold_hint(proof, busy, compute_apps, still_holding) if not (sick or missing) else ''))


def spared_words(spared: list[dict[str, Any]] | tuple[()]) -> str:
    """The spared holders, for a failure: one of them may be what still uses these GPUs."""
    if not spared:
        return ''
    listed = '; '.join('pid %s (%s, holds %s)' % (entry['pid'], entry['why'], ', '.join(entry['devices']))
                       for entry in spared)
    return ('Spared, as not this release\'s to end (a neighbour\'s or a foreign job\'s; end it yourself if it is '
            'what holds on): %s. ' % listed)


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

    def gpu_compute_apps(self, uuids: list[str] | None = None) -> list[dict[str, Any]]:
        """The compute apps, those on uuids only where given, noted on the timeline."""
        started = self.timeline.clock()
        try:
            apps = [app for app in self.reader.gpu_compute_apps() if uuids is None or app['gpu_uuid'] in uuids]
        except Exception as exc:
            self.timeline.add('compute apps', 'failed: %s' % exc, at=started, took=self.timeline.clock() - started)
            raise
        self.timeline.add('compute apps', ', '.join('pid %s on %s' % (app['pid'], app['gpu_uuid']) for app in apps)
                          or 'none', at=started, took=self.timeline.clock() - started)
        return apps

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

    def _read_locations(self) -> list[dict[str, Any]]:
        nvml = self.nvml
        try:
            located = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                located.append({'index': index, 'uuid': _text(nvml.nvmlDeviceGetUUID(handle)),
                                'bus_id': bus_key(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))})
        except nvml.NVMLError as exc:
            raise NvidiaSmiError('NVML could not locate the GPUs: %s' % exc)
        return located

    def locations(self) -> list[dict[str, Any]]:
        """{index, uuid, bus_id} of every GPU (as GpuReader.locations)."""
        return self._call(self._read_locations, 'PCI bus reading')

    def _read_apps(self) -> list[dict[str, Any]]:
        nvml = self.nvml
        apps = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = getattr(process, 'usedGpuMemory', None)
                    apps.append({'pid': process.pid, 'process_name': None, 'gpu_uuid': uuid,
                                 'used_memory_mib': None if used is None else int(math.ceil(used / float(MIB)))})
        except nvml.NVMLError as exc:
            raise NvidiaSmiError('NVML could not list the compute processes: %s' % exc)
        return apps

    def gpu_compute_apps(self) -> list[dict[str, Any]]:
        """Every compute process with its GPU's UUID (as GpuReader.gpu_compute_apps), from NVML's running process
        list; NVML gives no process name (None)."""
        return self._call(self._read_apps, 'compute process listing')

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

    def locations(self) -> list[dict[str, Any]]:
        return self.gpus_reader.locations()

    def gpu_compute_apps(self) -> list[dict[str, Any]]:
        """NVML's running process list where NVML reads the memory, else (or where NVML cannot list) nvidia-smi's."""
        if self.gpus_reader is self.smi_reader:
            return self.smi_reader.gpu_compute_apps()
        try:
            return self.gpus_reader.gpu_compute_apps()
        except NvidiaSmiError:
            if self.smi_reader is None:
                raise
            return self.smi_reader.gpu_compute_apps()

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


# gpu_release's options but the two a caller sets itself (await_exit, guard): sglang_server's stop takes them as its
# `release` option, validated against this spec there.
RELEASE_SPEC: dict[str, dict[str, Any]] = dict(
    devices=dict(type='list', elements='str', default=NVIDIA_DEVICE_GLOBS),
    exclude=dict(type='list', elements='str', default=[]),
    builtin_exclude=dict(type='list', elements='str', default=NVIDIA_DAEMON_EXCLUDES),
    term_timeout=dict(type='float', default=10.0),
    kill_timeout=dict(type='float', default=10.0),
    max_used_mib=dict(type='int', default=0),
    memory_timeout=dict(type='float', default=60.0),
    command_timeout=dict(type='float', default=30.0),
    nvidia_smi=dict(type='path'),
    memory_reader=dict(type='str', default='auto', choices=['auto', 'nvml', 'nvidia-smi']),
    gpus=dict(type='list', elements='str', default=[]),
    driver_info=dict(type='path', default=DRIVER_INFO),
)


class ReleaseFailed(Exception):
    """The release failed; the message says what was found and what was (not) signalled."""


def empty_result() -> dict[str, Any]:
    """gpu_release's result keys at their empty values (the same keys every run)."""
    return dict(killed=[], targets=[], excluded=[], spared=[], scope=[], gpus_before=[], gpus=[], devices=[],
                compute_apps=[], elapsed=0.0, cmd=[], memory_reader='', awaited=nothing_awaited(), timeline=[])


# Why a holder is spared when the release is scoped to some GPUs (the gpus option).
OTHER_GPUS = 'other GPUs'
SHARED_ONLY = 'shared devices only'


def scope_reason(devices: list[str], minors: set[int], own: bool) -> str | None:
    """Why a holder of devices is spared by a release of the GPUs of these device minors, or None to end it.

    A holder of any GPU outside them is a neighbour's or a foreign job's, even when it holds one of them too: ending
    it would end work this release does not own. A holder of the shared files alone (nvidiactl, nvidia-uvm, caps)
    could belong to anyone: it is ended only when it is the stopping server's own (``own``).
    """
    held = set(gpu_minors(devices))
    if held - minors:
        return OTHER_GPUS
    if held:
        return None
    return None if own else SHARED_ONLY


def scoped_targets(targets: list[ProcessRecord], holders: dict[int, list[str]], minors: set[int],
                   own: set[int]) -> tuple[list[ProcessRecord], list[dict[str, Any]]]:
    """(the targets a release of these GPUs ends, the spared ones as RV(spared) lists them)."""
    kept, spared = [], []
    for record in targets:
        reason = scope_reason(holders[record.pid], minors, record.pid in own)
        if reason is None:
            kept.append(record)
        else:
            spared.append({'pid': record.pid, 'cmdline': record.cmdline, 'devices': holders[record.pid],
                           'gpus': gpu_minors(holders[record.pid]), 'why': reason})
    return kept, spared


def read_session(pid: int, proc_root: str = '/proc') -> int | None:
    """The session id of pid (field 6 of /proc/PID/stat), or None when it is gone."""
    try:
        with open(os.path.join(proc_root, str(pid), 'stat'), 'rb') as stat_file:
            stat = stat_file.read().decode('utf-8', 'replace')
        return int(stat[stat.rfind(')') + 2:].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def own_processes(await_pids: list[int], parents: dict[int, int], sessions: dict[int, int | None],
                  own_session: int | None) -> set[int]:
    """The stopping server's processes: await_pids, their descendants, and every process of their sessions.

    ``parents`` maps pid to ppid and ``sessions`` pid to session id, both read before the wait (a child whose parent
    exits is re-parented, and its lineage lost). A session this module shares (its caller started the server from
    the same terminal) or session 0 (the kernel's) counts for nothing: it would take in unrelated processes.
    """
    own = set(await_pids)
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    queue = list(own)
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in own:
                own.add(child)
                queue.append(child)
    server_sessions = {sessions.get(pid) for pid in await_pids} - {None, 0, own_session}
    own.update(pid for pid, session in sessions.items() if session in server_sessions)
    return own


def release_bound(params: dict[str, Any], awaits: bool) -> float:
    """Seconds the release may take: two readings, the wait for the stopping server, the kill, the proof."""
    return (2 * params['command_timeout'] + (params['term_timeout'] + params['kill_timeout'] if awaits else 0)
            + params['term_timeout'] + params['kill_timeout'] + params['memory_timeout'])


class GpuRelease:
    """One release: wait for the stopping server (await_exit), end the other holders, prove the memory free.

    ``host`` is the AnsibleModule (its command runner, warn and debug, get_bin_path); ``params`` hold RELEASE_SPEC's
    options. Fills ``result`` (empty_result's keys) in place and raises ReleaseFailed, so that a failure still
    returns what was already signalled.
    """

    def __init__(self, host: Any, params: dict[str, Any], check_mode: bool, timeline: Timeline) -> None:
        self.host, self.params, self.check_mode, self.timeline = host, params, check_mode, timeline

    def excludes(self) -> list[Pattern]:
        """The compiled exclude patterns, once every option is known to be usable (before anything is signalled)."""
        params = self.params
        for name in ('term_timeout', 'kill_timeout', 'memory_timeout', 'max_used_mib'):
            if params[name] < 0:
                raise ReleaseFailed('%s must not be negative' % name)
        if params['command_timeout'] <= 0:
            raise ReleaseFailed('command_timeout must be greater than 0')
        problems = gpu_entry_problems([entry.strip() for entry in params['gpus']])
        if problems:
            raise ReleaseFailed('gpus: %s; list each GPU once, as `nvidia-smi --query-gpu=index,uuid --format=csv` '
                                'prints it' % '; '.join(problems))
        try:
            return compile_patterns(params['builtin_exclude'] + params['exclude'], 'exclude pattern')
        except ValueError as exc:
            raise ReleaseFailed(str(exc)) from None

    def run(self, result: dict[str, Any], await_pids: list[int], lease: Renewer) -> None:
        excludes = self.excludes()
        lease.renew(release_bound(self.params, bool(await_pids)))
        try:
            result['devices'] = expand_devices(self.params['devices'])
        except DeviceError as exc:
            raise ReleaseFailed('%s; nothing was signalled' % exc) from None
        reader = TracedReader(self.memory_reader(), self.timeline)
        result['cmd'], result['memory_reader'] = reader.cmd(), reader.source_name
        try:
            self.release_with(result, await_pids, excludes, lease, reader)
        finally:
            reader.close()
            result['timeline'] = self.timeline.report()

    def memory_reader(self) -> MemoryReader:
        """The memory reader memory_reader asks for (NVML or nvidia-smi), nvidia-smi also for compute apps."""
        params = self.params
        nvidia_smi = params['nvidia_smi'] or self.host.get_bin_path('nvidia-smi', required=False)
        smi = GpuReader(CommandRunner(self.host, params['command_timeout']), nvidia_smi) if nvidia_smi else None
        try:
            reader, why = choose_reader(params['memory_reader'], smi, params['command_timeout'])
        except (NvmlUnavailable, NvidiaSmiError) as exc:
            raise ReleaseFailed('%s; nothing was signalled' % exc) from None
        if why is not None and params['memory_reader'] == 'auto':
            self.host.debug('gpu_release reads the memory with nvidia-smi: %s' % why)
        return reader

    def release_with(self, result: dict[str, Any], await_pids: list[int], excludes: list[Pattern], lease: Renewer,
                     reader: TracedReader) -> None:
        params = self.params
        expected = self.read_before(reader, result)
        scope = result['scope'] = self.resolve_scope(reader, result['devices'])
        minors = {gpu['minor'] for gpu in scope}
        local = TracedProcesses(LocalProcesses(), self.timeline)
        # Read before the wait: once the server's main process exits, its children's lineage is lost.
        own = self.stopping_server(local, await_pids) if scope else set()
        ended_early = self.await_stopping(local, await_pids, result)
        holders = local.holders(result['devices'])
        targets, result['excluded'] = classify_holders(holders, excludes, protected_pids())
        if scope:
            targets, result['spared'] = scoped_targets(targets, holders, minors, own)
        result['targets'] = [described(record, devices=holders[record.pid]) for record in targets]
        if self.check_mode:
            result.update(killed=planned_kills(targets, params['term_timeout']), changed=bool(targets),
                          gpus=result['gpus_before'])
            return
        started = self.end_holders(local, targets, ended_early, result)
        if scope:
            expected = [gpu['index'] for gpu in scope]
        self.prove_free(reader, local, expected, started, result)
        lease.done()

    def resolve_scope(self, reader: TracedReader, devices: list[str]) -> list[dict[str, Any]]:
        """{index, uuid, bus_id, minor} of each GPU of the gpus option ([] for every GPU), each with a device file
        among devices; ReleaseFailed before anything is signalled when one cannot be told apart."""
        wanted = [entry.strip() for entry in self.params['gpus']]
        if not wanted:
            return []
        started = self.timeline.clock()
        try:
            scope = resolve_gpus(wanted, reader.locations(), read_driver_information(self.params['driver_info']))
        except (CommandError, NvidiaSmiError, ScopeError) as exc:
            raise ReleaseFailed('cannot tell the GPUs %s apart on this machine, nothing was signalled: %s'
                                % (', '.join(wanted), exc)) from None
        self.timeline.add('gpus located', ', '.join('GPU %s minor %s' % (gpu['index'], gpu['minor']) for gpu in scope),
                          at=started, took=self.timeline.clock() - started)
        without = [gpu for gpu in scope if gpu['minor'] not in gpu_minors(devices)]
        if without:
            raise ReleaseFailed('no device file among devices is %s, nothing was signalled: the holders of %s cannot '
                                'be found. Let devices match them (its default does).' % (
                                    ', '.join('nvidia%d' % gpu['minor'] for gpu in without),
                                    ', '.join('GPU %s' % gpu['index'] for gpu in without)))
        return scope

    def stopping_server(self, local: TracedProcesses, await_pids: list[int]) -> set[int]:
        """The stopping server's processes (own_processes), read now; empty when nothing is awaited."""
        if not await_pids:
            return set()
        records = local.list()
        return own_processes(await_pids, {record.pid: record.ppid for record in records},
                             {record.pid: read_session(record.pid) for record in records}, os.getsid(0))

    def read_before(self, reader: TracedReader, result: dict[str, Any]) -> list[int]:
        """gpus_before; the indices the proof afterwards must read again."""
        try:
            result['gpus_before'] = reader.gpus()
        except (CommandError, NvidiaSmiError) as exc:
            raise ReleaseFailed('cannot read the GPUs before releasing them, nothing was signalled: %s' % exc) from None
        for gpu in unreadable(result['gpus_before']):
            # Informational before the kill: the proof afterwards must read every GPU anyway.
            self.host.warn('before the release, GPU %s could not be read: %s' % (
                gpu['index'] if gpu['index'] is not None else '?', gpu['error']))
        return [gpu['index'] for gpu in result['gpus_before'] if gpu['index'] is not None]

    def await_stopping(self, local: TracedProcesses, await_pids: list[int], result: dict[str, Any]) -> list[Any]:
        """Wait for the stopping server's processes (await_exit); the ones that needed SIGKILL."""
        if not await_pids or self.check_mode:
            return []
        # gpus_before is read first: it shows what the stopping server still held.
        awaited = await_exit(local, await_pids, self.params['term_timeout'], self.params['kill_timeout'])
        result['awaited'] = awaited.report
        result['killed'] = awaited.killed
        result['changed'] = bool(awaited.killed)
        if awaited.failure():
            raise ReleaseFailed('%s; nothing else was signalled' % awaited.failure())
        return awaited.killed

    def end_holders(self, local: TracedProcesses, targets: list[Any], ended_early: list[Any],
                    result: dict[str, Any]) -> float:
        """SIGTERM, then SIGKILL for the survivors; returns when the kill began (monotonic clock)."""
        started = self.timeline.origin = self.timeline.clock()
        outcome = Termination(local, self.params['term_timeout'], self.params['kill_timeout']).run(targets)
        result['killed'] = ended_early + outcome.killed
        result['changed'] = bool(result['killed'])
        if outcome.remaining:
            result['elapsed'] = round(time.monotonic() - started, 3)
            raise ReleaseFailed('%d GPU holder(s) survived SIGKILL: %s' % (
                len(outcome.remaining), '; '.join(record.describe() for record in outcome.remaining)))
        return started

    def prove_free(self, reader: TracedReader, local: TracedProcesses, expected: list[int], started: float,
                   result: dict[str, Any]) -> None:
        params = self.params
        scope = result['scope']
        uuids = [gpu['uuid'] for gpu in scope]
        # Scoped, the proof covers those GPUs alone, and memory is not enough: no compute app may be left on them.
        proof = FreeMemoryProof(reader, params['max_used_mib'], expected, scope=expected if scope else None,
                                processes=(lambda: reader.gpu_compute_apps(uuids)) if scope else None)
        result['gpus'] = proof.wait(params['memory_timeout'])
        result['elapsed'] = round(time.monotonic() - started, 3)
        self.timeline.add('memory free' if proof.proven() else 'memory not proven free')
        if proof.timed_out is not None:
            raise ReleaseFailed('cannot prove the GPU memory free: %s; %s. A hung nvidia-smi usually means a wedged '
                                'driver: see dmesg (Xid errors) on this host.'
                                % (proof.timed_out, signalled_summary(result['killed'])))
        if proof.proven():
            return
        devices = result['devices']
        if scope:
            minors = {gpu['minor'] for gpu in scope}
            devices = [path for path in devices if set(gpu_minors([path])) & minors]
            try:
                result['compute_apps'] = reader.gpu_compute_apps(uuids)
            except (CommandError, NvidiaSmiError) as exc:
                result['compute_apps'] = [{'error': str(exc)}]
        else:
            result['compute_apps'] = reader.compute_apps()
        raise ReleaseFailed(not_free_message(proof, params['memory_timeout'], result['killed'], result['compute_apps'],
                                             sorted(local.holders(devices)), result['spared']))
