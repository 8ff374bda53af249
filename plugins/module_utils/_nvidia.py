# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi: argv builders and parsers into GPU records.

Parsing is pure (text in, records out) and tested on output captured from a
real H200. ``nvidia-smi | grep 0MiB`` cannot tell a free GPU from a busy one
(it matched both "0MiB / 143771MiB" and the process table); the CSV query
below gives one number per GPU.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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


class NvidiaSmiError(Exception):
    """nvidia-smi failed or printed something we cannot read."""


class NvidiaSmiCommand(object):
    def __init__(self, nvidia_smi_path):
        self.path = nvidia_smi_path

    def query_gpus(self):
        return [self.path, '--query-gpu=' + ','.join(GPU_FIELDS), CSV_FORMAT]

    def query_compute_apps(self):
        return [self.path, '--query-compute-apps=' + ','.join(APP_FIELDS), CSV_FORMAT]


def _csv_rows(stdout, width, what):
    rows = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(',')]
        if len(cells) != width:
            raise NvidiaSmiError('unparsable nvidia-smi %s line (expected %d fields): %r'
                                 % (what, width, line))
        rows.append(cells)
    return rows


def _mib(value, line_desc):
    try:
        return int(value)
    except ValueError:
        # "[N/A]" or "[Not Supported]": a number we cannot compare to a threshold.
        raise NvidiaSmiError('nvidia-smi reported %r instead of a MiB number for %s' % (value, line_desc))


def parse_gpus(stdout):
    """GPU records from ``--query-gpu=index,uuid,memory.used,memory.total`` CSV."""
    gpus = []
    for index, uuid, used, total in _csv_rows(stdout, len(GPU_FIELDS), 'GPU'):
        desc = 'GPU %s' % index
        gpus.append({
            'index': _mib(index, 'the index of a GPU'),
            'uuid': uuid,
            'memory_used_mib': _mib(used, desc),
            'memory_total_mib': _mib(total, desc),
        })
    if not gpus:
        raise NvidiaSmiError('nvidia-smi listed no GPU')
    return gpus


def parse_compute_apps(stdout):
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
                     'used_memory_mib': _mib(used.strip(), 'compute app %s' % pid.strip())})
    return apps


def gpus_over(gpus, max_used_mib):
    return [gpu for gpu in gpus if gpu['memory_used_mib'] > max_used_mib]


def format_gpu_table(gpus, max_used_mib):
    lines = ['GPU  memory.used/total MiB  uuid']
    for gpu in gpus:
        flag = '  <-- over %d MiB' % max_used_mib if gpu['memory_used_mib'] > max_used_mib else ''
        lines.append('%-4d %8d/%-8d %s%s'
                     % (gpu['index'], gpu['memory_used_mib'], gpu['memory_total_mib'], gpu['uuid'], flag))
    return '\n'.join(lines)
