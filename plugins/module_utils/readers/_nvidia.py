# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi: argv builders, parsers into GPU records, and the one proof that GPU memory is free.

Readers layer. Pure standard library: the host-side guard imports this without Ansible.

Parsing is pure (text in, records out) and tested on output captured from a
real H200. ``nvidia-smi | grep 0MiB`` cannot tell a free GPU from a busy one
(it matched both "0MiB / 143771MiB" and the process table); the CSV query
below gives one number per GPU.
"""

from __future__ import annotations

import glob
import os
import stat
from typing import Any

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until

GPU_FIELDS = ('index', 'uuid', 'memory.used', 'memory.total')
APP_FIELDS = ('pid', 'process_name', 'used_memory')
CSV_FORMAT = '--format=csv,noheader,nounits'
NVIDIA_DEVICE_GLOBS = [
    '/dev/nvidia[0-9]*',
    '/dev/nvidiactl',
    '/dev/nvidia-uvm*',
    '/dev/nvidia-caps/*',
]
# Daemons that hold /dev/nvidia* by design; killing them breaks NVLink
# (fabricmanager), monitoring (DCGM) or the display, and frees no model memory.
NVIDIA_DAEMON_EXCLUDES = [
    r'^nvidia-persistenced$',
    r'^nv-fabricmanager$',
    r'^nv-hostengine$',
    r'^dcgm',
    r'^Xorg$',
    r'^X$',
]


# First and longest wait between two nvidia-smi readings (seconds).
POLL_INTERVALS = (0.05, 0.25)


class DeviceError(Exception):
    """The device patterns match nothing, or match something that is not an NVIDIA device file."""


def device_refusal(path: str) -> str | None:
    """Why path is not an NVIDIA device file, or None when it is one.

    A name starting with "nvidia", and under /dev a character device: "/dev/*" matched
    /dev/null, which would make every process on the host a holder.
    """
    real = os.path.realpath(path)
    for name in sorted({path, real}):
        if not os.path.basename(name).startswith('nvidia'):
            return 'its name does not start with "nvidia"' + ('' if name == path else ' (it links to %s)' % real)
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        return 'it cannot be read: %s' % exc.strerror
    under_dev = any(name == '/dev' or name.startswith('/dev/') for name in (path, real))
    if under_dev and not stat.S_ISCHR(mode):
        return 'it is under /dev but not a character device'
    if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
        return 'it is not a device file (a directory or other special file)'
    return None


def expand_devices(patterns: list[str]) -> list[str]:
    """Paths the glob patterns match, each with its real path (what /proc/PID/fd links show).

    Raises DeviceError naming every refused path, or when nothing matches at all.
    """
    matched = set()
    for pattern in patterns:
        matched.update(glob.glob(pattern))
    refused = ['%s (%s)' % (path, reason) for path, reason in
               ((path, device_refusal(path)) for path in sorted(matched)) if reason]
    if refused:
        raise DeviceError('refusing device paths that are not NVIDIA device files: %s' % '; '.join(refused))
    if not matched:
        raise DeviceError('the device patterns %s match no file: is the NVIDIA driver loaded (ls -l /dev/nvidia*)? '
                          'A typo here would release nothing' % ', '.join(patterns))
    paths = set(matched)
    paths.update(os.path.realpath(path) for path in matched)
    return sorted(paths)


class NvidiaSmiError(Exception):
    """nvidia-smi failed or printed something we cannot read."""


class NvidiaSmiCommand:
    def __init__(self, nvidia_smi_path: str) -> None:
        self.path = nvidia_smi_path

    def query_gpus(self) -> list[str]:
        return [self.path, '--query-gpu=' + ','.join(GPU_FIELDS), CSV_FORMAT]

    def query_compute_apps(self) -> list[str]:
        return [self.path, '--query-compute-apps=' + ','.join(APP_FIELDS), CSV_FORMAT]


def _int_or_none(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def parse_gpus(stdout: str) -> list[dict[str, Any]]:
    """GPU records from ``--query-gpu=index,uuid,memory.used,memory.total`` CSV.

    A GPU whose cells are not numbers ("[N/A]", "[Unknown Error]", "[GPU requires reset]") or a
    line that is not a CSV row (nvidia-smi prints "Unable to determine the device handle for
    GPU ...: Unknown Error" for a GPU it cannot reach) gives a record with ``error`` set and None
    for what could not be read: one sick GPU does not hide the others. Raises NvidiaSmiError only
    when no line names a GPU at all (the driver is unreachable, or nothing was printed).
    """
    gpus = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(',')]
        if len(cells) != len(GPU_FIELDS) or _int_or_none(cells[0]) is None:
            gpus.append({'index': None, 'uuid': None, 'memory_used_mib': None, 'memory_total_mib': None,
                         'error': 'unparsable nvidia-smi line: %s' % line.strip()})
            continue
        index, uuid, used, total = cells
        gpu = {'index': int(index), 'uuid': uuid, 'memory_used_mib': _int_or_none(used),
               'memory_total_mib': _int_or_none(total), 'error': None}
        bad = ['%s %r' % (field, value) for field, value in (('memory.used', used), ('memory.total', total))
               if _int_or_none(value) is None]
        if bad:
            gpu['error'] = 'nvidia-smi reported %s instead of a MiB number' % ' and '.join(bad)
        gpus.append(gpu)
    if not any(gpu['index'] is not None for gpu in gpus):
        raise NvidiaSmiError('nvidia-smi listed no GPU%s' % (
            ': ' + '; '.join(gpu['error'] for gpu in gpus) if gpus else ''))
    return gpus


def _mib(value: str, line_desc: str) -> int:
    try:
        return int(value)
    except ValueError:
        # "[N/A]" or "[Not Supported]": a number we cannot compare to a threshold.
        raise NvidiaSmiError('nvidia-smi reported %r instead of a MiB number for %s' % (value, line_desc))


def parse_compute_apps(stdout: str) -> list[Any]:
    """Compute-app records from ``--query-compute-apps=pid,process_name,used_memory`` CSV."""
    apps = []
    for line in stdout.splitlines():
        if not line.strip() or line.strip().startswith('No running'):
            continue
        # process_name may contain commas; pid is first and memory last.
        head, sep, used = line.rpartition(',')
        pid, sep2, name = head.partition(',')
        if not sep or not sep2:
            raise NvidiaSmiError('unparsable nvidia-smi compute-apps line: %r' % line)
        apps.append({'pid': _mib(pid.strip(), 'a compute app pid'), 'process_name': name.strip(),
                     'used_memory_mib': _int_or_none(used.strip())})
    return apps


def unreadable(gpus: list[dict[str, Any]]) -> list[Any]:
    """GPUs (or lines) whose memory could not be read."""
    return [gpu for gpu in gpus if gpu['error'] is not None or gpu['memory_used_mib'] is None]


def gpus_over(gpus: list[dict[str, Any]], max_used_mib: int) -> list[Any]:
    """GPUs not shown to be at or under max_used_mib: over it, or unreadable (fail safe for "is it free")."""
    return [gpu for gpu in gpus if gpu['memory_used_mib'] is None or gpu['error'] is not None or
            gpu['memory_used_mib'] > max_used_mib]


def missing_gpus(gpus: list[dict[str, Any]], expected_indices: list[int] | tuple[()]) -> list[Any]:
    """Indices seen earlier that this reading does not list."""
    seen = {gpu['index'] for gpu in gpus}
    return sorted(index for index in expected_indices if index not in seen)


def proven_free(gpus: list[Any], max_used_mib: int, expected_indices: list[int] | tuple[()] = ()) -> bool:
    """True only when every GPU (each expected index included) was read and is at or under the threshold."""
    return bool(gpus) and not unreadable(gpus) and not gpus_over(gpus, max_used_mib) and \
        not missing_gpus(gpus, expected_indices)


def _cell(value: str | int | None) -> str:
    return '?' if value is None else str(value)


def format_gpu_table(gpus: list[dict[str, Any]], max_used_mib: int,
                     expected_indices: list[int] | tuple[()] = ()) -> str:
    lines = ['GPU  memory.used/total MiB  uuid']
    for gpu in gpus:
        if gpu['error'] is not None:
            flag = '  <-- unreadable: %s' % gpu['error']
        elif gpu['memory_used_mib'] is not None and gpu['memory_used_mib'] > max_used_mib:
            flag = '  <-- over %d MiB' % max_used_mib
        else:
            flag = ''
        lines.append('%-4s %8s/%-8s %s%s' % (_cell(gpu['index']), _cell(gpu['memory_used_mib']),
                                             _cell(gpu['memory_total_mib']), _cell(gpu['uuid']), flag))
    for index in missing_gpus(gpus, expected_indices):
        lines.append('%-4d %8s/%-8s %s  <-- missing: listed before the release, not now' % (index, '?', '?', '?'))
    return '\n'.join(lines)


def memory_dropped(previous: list[Any], current: list[Any]) -> bool:
    """True when some GPU read in both readings uses less memory in the second (the driver is freeing it)."""
    before = {gpu['index']: gpu['memory_used_mib'] for gpu in previous
              if gpu['index'] is not None and gpu['memory_used_mib'] is not None}
    return any(gpu['index'] in before and gpu['memory_used_mib'] is not None and
               gpu['memory_used_mib'] < before[gpu['index']] for gpu in current)


class GpuReader:
    """nvidia-smi through the one command runner (either back end): every call bounded by its deadline."""

    # One nvidia-smi call costs about 22 ms (a process start) on an H200.
    poll_intervals = POLL_INTERVALS
    source_name = 'nvidia-smi'

    def __init__(self, runner: CommandRunner, nvidia_smi_path: str, timeout: float | None = None) -> None:
        self.runner = runner
        self.command = NvidiaSmiCommand(nvidia_smi_path)
        self.timeout = timeout

    def gpus(self) -> list[dict[str, Any]]:
        """GPU records; NvidiaSmiError when nvidia-smi fails and names no GPU; CommandError on a timeout."""
        result = self.runner.run(self.command.query_gpus(), timeout=self.timeout)
        if result.timed_out:
            raise CommandError(result.describe(), result)
        try:
            gpus = parse_gpus(result.stdout)
        except NvidiaSmiError:
            if result.rc != 0:
                # nvidia-smi prints its driver errors ("couldn't communicate with the NVIDIA driver") on stdout.
                raise NvidiaSmiError(result.describe())
            raise
        if result.rc != 0:
            # Some GPUs listed, but nvidia-smi still failed: keep the readings, and say so.
            gpus.append({'index': None, 'uuid': None, 'memory_used_mib': None, 'memory_total_mib': None,
                         'error': result.describe()})
        return gpus

    def compute_apps(self) -> list[Any]:
        result = self.runner.run(self.command.query_compute_apps(), timeout=self.timeout)
        if result.timed_out or result.rc != 0:
            return [{'error': result.describe()}]
        try:
            return parse_compute_apps(result.stdout)
        except NvidiaSmiError as exc:
            return [{'error': str(exc)}]


class FreeMemoryProof:
    """Polls nvidia-smi until every expected GPU is read and at or under the threshold.

    gpu_release and the guard both prove "the memory is free" with this. ``expected_indices``: the GPUs
    seen before the release; None (the guard, which has no reading from before the stop) takes those of
    the first reading, so that a GPU that drops off the bus while the memory drains is never taken as free.
    A failed or unreadable reading is polled again (a driver may answer [N/A] for a moment); a hung
    nvidia-smi ends the polling at once, since the next call would hang as well.
    """

    def __init__(self, reader: Any, max_used_mib: int, expected_indices: list[int] | None = None) -> None:
        self.reader = reader
        self.max_used_mib = max_used_mib
        self.expected = expected_indices
        self.timed_out = None
        self.last_error = None
        self.gpus = []

    def read(self) -> list[Any]:
        try:
            gpus = self.reader.gpus()
            self.last_error = None
        except CommandError as exc:
            self.timed_out = exc
            gpus = []
        except NvidiaSmiError as exc:
            self.last_error = str(exc)
            gpus = []
        if self.expected is None and gpus:
            self.expected = [gpu['index'] for gpu in gpus if gpu['index'] is not None]
        self.gpus = gpus
        return gpus

    def free(self, gpus: list[dict[str, Any]] | None = None) -> bool:
        return proven_free(self.gpus if gpus is None else gpus, self.max_used_mib, self.expected or ())

    def done(self, gpus: list[Any]) -> bool:
        return self.timed_out is not None or self.free(gpus)

    def wait(self, timeout: float, max_interval: float | None = None) -> list[Any]:
        """The last reading: free, or what it was when timeout passed (or nvidia-smi hung).

        Polls at the reader's pace (``poll_intervals``: first and longest wait; max_interval, when
        given, caps the latter) and starts again from the first wait whenever the memory in use went
        down: on an H200 the driver frees a killed holder's memory over 0.1 to 0.4 s after it exits.
        """
        first, longest = getattr(self.reader, 'poll_intervals', POLL_INTERVALS)
        if max_interval is not None:
            longest = max(first, max_interval)
        return poll_until(self.read, self.done, timeout, first_interval=first, max_interval=longest,
                          progressed=memory_dropped)

    def busy(self) -> list[Any]:
        """Readable GPUs of the last reading over the threshold."""
        sick = unreadable(self.gpus)
        return [gpu for gpu in gpus_over(self.gpus, self.max_used_mib) if gpu not in sick]

    def missing(self) -> list[Any]:
        return missing_gpus(self.gpus, self.expected or ())
