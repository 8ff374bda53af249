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
import re
import stat
from typing import Any

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until

GPU_FIELDS = ('index', 'uuid', 'memory.used', 'memory.total')
APP_FIELDS = ('pid', 'process_name', 'used_memory')
# Where each GPU is: nvidia-smi's index (PCI bus order) and UUID against its PCI bus id, which names the GPU's folder
# of driver information (DRIVER_INFO), the one place that gives its /dev/nvidiaN minor.
LOCATION_FIELDS = ('index', 'uuid', 'pci.bus_id')
# Compute apps with the GPU each runs on: one line per process and GPU.
GPU_APP_FIELDS = ('pid', 'process_name', 'used_memory', 'gpu_uuid')
DRIVER_INFO = '/proc/driver/nvidia/gpus'
INDEX_ENTRY = re.compile(r'^[0-9]+$')
UUID_ENTRY = re.compile(r'^GPU-[0-9A-Za-z-]+$')
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

    def query_locations(self) -> list[str]:
        return [self.path, '--query-gpu=' + ','.join(LOCATION_FIELDS), CSV_FORMAT]

    def query_gpu_compute_apps(self) -> list[str]:
        return [self.path, '--query-compute-apps=' + ','.join(GPU_APP_FIELDS), CSV_FORMAT]


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


def parse_gpu_compute_apps(stdout: str) -> list[dict[str, Any]]:
    """Compute-app records with their GPU from ``--query-compute-apps=pid,process_name,used_memory,gpu_uuid`` CSV.

    One line per process and GPU it has a context on; used_memory is [N/A] where the driver cannot tell (inside
    some containers, under MIG): the record then has None. The pid is the host's, even inside a container.
    """
    apps = []
    for line in stdout.splitlines():
        if not line.strip() or line.strip().startswith('No running'):
            continue
        # process_name may contain commas; pid is first, memory and the GPU's UUID last.
        parts = line.rsplit(',', 2)
        pid, sep, name = parts[0].partition(',')
        if len(parts) != 3 or not sep or not UUID_ENTRY.match(parts[2].strip()):
            raise NvidiaSmiError('unparsable nvidia-smi compute-apps line: %r' % line)
        apps.append({'pid': _mib(pid.strip(), 'a compute app pid'), 'process_name': name.strip(),
                     'used_memory_mib': _int_or_none(parts[1].strip()), 'gpu_uuid': parts[2].strip()})
    return apps


def bus_key(bus_id: str) -> str:
    """One spelling of a PCI bus id: nvidia-smi prints 00000000:18:00.0, the driver's folders 0000:18:00.0."""
    domain, sep, rest = bus_id.strip().partition(':')
    try:
        return '%04x:%s' % (int(domain, 16), rest.lower()) if sep else bus_id.strip().lower()
    except ValueError:
        return bus_id.strip().lower()


def parse_locations(stdout: str) -> list[dict[str, Any]]:
    """{index, uuid, bus_id} per GPU from ``--query-gpu=index,uuid,pci.bus_id`` CSV; NvidiaSmiError naming the line
    that is not one (a GPU that cannot be located cannot be released alone, nor proven someone else's)."""
    gpus = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(',')]
        if len(cells) != len(LOCATION_FIELDS) or _int_or_none(cells[0]) is None or not cells[2].count(':'):
            raise NvidiaSmiError('unparsable nvidia-smi line for %s: %s' % (','.join(LOCATION_FIELDS), line.strip()))
        gpus.append({'index': int(cells[0]), 'uuid': cells[1], 'bus_id': bus_key(cells[2])})
    if not gpus:
        raise NvidiaSmiError('nvidia-smi listed no GPU for %s' % ','.join(LOCATION_FIELDS))
    return gpus


def parse_information(text: str) -> dict[str, Any]:
    """{minor, uuid, bus_id} from the driver's /proc/driver/nvidia/gpus/<bus id>/information ("Device Minor: 0",
    "GPU UUID: GPU-...", "Bus Location: 0000:18:00.0"; keys and values apart by a colon and tabs or spaces);
    None for what it does not say."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(':')
        if sep:
            fields[key.strip()] = value.strip()
    minor = fields.get('Device Minor', '')
    return {'minor': int(minor) if INDEX_ENTRY.match(minor) else None, 'uuid': fields.get('GPU UUID') or None,
            'bus_id': bus_key(fields['Bus Location']) if fields.get('Bus Location') else None}


class ScopeError(Exception):
    """The GPUs asked for cannot be told apart on this machine: not there, or no device minor for them."""


def read_driver_information(folder: str) -> list[dict[str, Any]]:
    """{bus_id, minor, uuid, path} of each GPU folder under folder (the driver's DRIVER_INFO); the bus id from the
    file, else from the folder's name. ScopeError when the folder cannot be listed."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise ScopeError('the driver information folder %s cannot be listed (%s): is the NVIDIA driver loaded, or '
                         'does driver_info point elsewhere?' % (folder, exc.strerror))
    gpus = []
    for name in names:
        path = os.path.join(folder, name, 'information')
        try:
            with open(path, 'rb') as handle:
                info = parse_information(handle.read().decode('utf-8', 'replace'))
        except OSError:
            continue
        gpus.append(dict(info, bus_id=info['bus_id'] or bus_key(name), path=path))
    return gpus


def gpu_entry_problems(entries: list[str]) -> list[str]:
    """What a list of GPUs (nvidia-smi indices or UUIDs) may not hold: anything else, or one GPU twice."""
    problems = ['%r is neither a GPU index as nvidia-smi numbers them (0, 1, ...) nor a GPU UUID (GPU-...)' % entry
                for entry in entries if not INDEX_ENTRY.match(entry) and not UUID_ENTRY.match(entry)]
    twice = sorted({entry for entry in entries if entries.count(entry) > 1})
    if twice:
        problems.append('%s named more than once' % ', '.join(twice))
    return problems


def resolve_gpus(wanted: list[str], locations: list[dict[str, Any]],
                 information: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """{index, uuid, bus_id, minor} of each GPU asked for (an nvidia-smi index or a UUID), in the order asked.

    The minor comes from the driver's information of the GPU's bus id, never from its index: the two need not be
    equal. ScopeError names every GPU that cannot be resolved, with what the machine has.
    """
    by_bus = {gpu['bus_id']: gpu for gpu in information}
    resolved, problems = [], []
    for entry in wanted:
        found = [gpu for gpu in locations if entry in (str(gpu['index']), gpu['uuid'])]
        if not found:
            problems.append('GPU %s is not on this machine' % entry)
            continue
        gpu = found[0]
        info = by_bus.get(gpu['bus_id'])
        if info is None or info['minor'] is None:
            problems.append('GPU %s (bus %s) has %s' % (entry, gpu['bus_id'], 'no driver information' if info is None
                                                        else 'no "Device Minor" line in %s' % info['path']))
        elif info['uuid'] and gpu['uuid'] and info['uuid'] != gpu['uuid']:
            problems.append('GPU %s is %s to nvidia-smi but %s in %s' % (entry, gpu['uuid'], info['uuid'], info['path']))
        else:
            resolved.append(dict(gpu, minor=info['minor']))
    if problems:
        raise ScopeError('%s. This machine has %s; its driver information lists %s' % (
            '; '.join(problems), ', '.join('%s %s (bus %s)' % (gpu['index'], gpu['uuid'], gpu['bus_id'])
                                           for gpu in locations) or 'no GPU',
            ', '.join('bus %s minor %s' % (info['bus_id'], info['minor']) for info in information) or 'no GPU'))
    return resolved


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

    def _checked(self, argv: list[str]) -> str:
        result = self.runner.run(argv, timeout=self.timeout)
        if result.timed_out:
            raise CommandError(result.describe(), result)
        if result.rc != 0:
            raise NvidiaSmiError(result.describe())
        return result.stdout

    def locations(self) -> list[dict[str, Any]]:
        """{index, uuid, bus_id} of every GPU; NvidiaSmiError when nvidia-smi fails, CommandError on a timeout."""
        return parse_locations(self._checked(self.command.query_locations()))

    def gpu_compute_apps(self) -> list[dict[str, Any]]:
        """Every compute app with its GPU's UUID; NvidiaSmiError when nvidia-smi fails, CommandError on a timeout."""
        return parse_gpu_compute_apps(self._checked(self.command.query_gpu_compute_apps()))


class FreeMemoryProof:
    """Polls nvidia-smi until every expected GPU is read and at or under the threshold.

    gpu_release and the guard both prove "the memory is free" with this. ``expected_indices``: the GPUs
    seen before the release; None (the guard, which has no reading from before the stop) takes those of
    the first reading, so that a GPU that drops off the bus while the memory drains is never taken as free.
    A failed or unreadable reading is polled again (a driver may answer [N/A] for a moment); a hung
    nvidia-smi ends the polling at once, since the next call would hang as well.

    ``scope`` (nvidia-smi indices), when given, is the GPUs the proof covers: a neighbour's GPU may read what it
    likes. ``processes``, when given, makes the proof stronger than memory: once the memory reads free it is asked
    for the compute apps left on the scope's GPUs, and the proof holds only when there is none (about 300 MB of a
    CUDA context stays allocated until its process exits, below many a threshold's reach on a large GPU).
    """

    def __init__(self, reader: Any, max_used_mib: int, expected_indices: list[int] | None = None,
                 scope: list[int] | None = None, processes: Any = None) -> None:
        self.reader = reader
        self.max_used_mib = max_used_mib
        self.expected = expected_indices
        self.scope = None if scope is None else set(scope)
        self.processes = processes
        self.timed_out = None
        self.last_error = None
        self.gpus = []
        # The last answer of processes (None until asked) and why it could not be read.
        self.apps_left = None
        self.apps_error = None

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
            # Within the scope: a neighbour's GPU is not one this proof must see again.
            self.expected = [gpu['index'] for gpu in self.covered(gpus) if gpu['index'] is not None]
        self.gpus = gpus
        return gpus

    def covered(self, gpus: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The records of a reading (default: the last) that the proof covers."""
        gpus = self.gpus if gpus is None else gpus
        return gpus if self.scope is None else [gpu for gpu in gpus if gpu['index'] in self.scope]

    def free(self, gpus: list[dict[str, Any]] | None = None) -> bool:
        return proven_free(self.covered(gpus), self.max_used_mib, self.expected or ())

    def no_compute_apps(self) -> bool:
        """Asks processes (when given); True when it names no compute app. A hung call ends the wait as a hung
        reading does; one that fails is asked again at the next free reading."""
        if self.processes is None:
            return True
        try:
            self.apps_left, self.apps_error = self.processes(), None
        except CommandError as exc:
            self.timed_out = exc
            return False
        except NvidiaSmiError as exc:
            self.apps_left, self.apps_error = None, str(exc)
            return False
        return not self.apps_left

    def proven(self) -> bool:
        """The last reading is free and, where processes is given, its answer on that reading named no app."""
        return self.free() and (self.processes is None or (self.apps_left == [] and self.apps_error is None))

    def done(self, gpus: list[Any]) -> bool:
        proven = self.free(gpus) and self.no_compute_apps()
        return proven or self.timed_out is not None

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
        """Readable GPUs of the last reading, among those covered, over the threshold."""
        covered = self.covered()
        sick = unreadable(covered)
        return [gpu for gpu in gpus_over(covered, self.max_used_mib) if gpu not in sick]

    def missing(self) -> list[Any]:
        return missing_gpus(self.gpus, self.expected or ())
