#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_release
short_description: End every process holding the NVIDIA devices and prove the GPU memory is free
version_added: 0.1.0
description:
  - Finds the processes that hold the NVIDIA device files open or mapped by reading C(/proc/PID/fd) and
    C(/proc/PID/maps) (what C(fuser) does, without depending on it; C(fuser -v) was seen to miss the
    C(/dev/nvidia-caps) files a torch process held).
  - Stops them with SIGTERM, a wait of O(term_timeout) seconds and SIGKILL for the survivors. Never
    signals itself, its parent processes, or the daemons matched by O(exclude); an excluded daemon that
    holds a device is reported in RV(excluded).
  - Then polls C(nvidia-smi --query-gpu=index,uuid,memory.used,memory.total) until every GPU uses at
    most O(max_used_mib) MiB, with no fixed sleep, and fails with a per-GPU table and the remaining
    compute apps when O(timeout) passes.
  - Replaces C(fuser -k /dev/nvidia*; sleep 2; nvidia-smi | grep 0MiB), which killed the NVIDIA daemons,
    missed C(/dev/nvidia-caps), guessed the wait, and could not tell a free GPU from a busy one.
author:
  - gpuops.sglang maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Reports the holders that would be killed and the current GPU memory; signals nothing.
  diff_mode:
    support: none
    description: Not applicable; the module acts on processes, not on files.
options:
  devices:
    description: Glob patterns of the device files whose holders are ended.
    type: list
    elements: str
    default: ['/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/nvidia-uvm*', '/dev/nvidia-caps/*']
  exclude:
    description:
      - Python regular expressions searched in a holder's command name (C(/proc/PID/comm)) and in the
        base name of its first argument (C(comm) is cut to 15 characters, C(nv-fabricmanager) has 16).
        A match is never killed.
    type: list
    elements: str
    default: ['^nvidia-persistenced$', '^nv-fabricmanager$', '^nv-hostengine$', '^dcgm', '^Xorg$', '^X$']
  term_timeout:
    description: Seconds between SIGTERM and SIGKILL. V(0) sends SIGKILL at once.
    type: float
    default: 10
  kill_timeout:
    description: Seconds to wait after SIGKILL before reporting a process that will not die.
    type: float
    default: 10
  max_used_mib:
    description:
      - A GPU counts as released when nvidia-smi reports at most this many MiB used. An idle H200 reads
        0; an idle H100 has been seen at about 4.
    type: int
    default: 0
  timeout:
    description: Seconds the GPU memory may take to drain after the holders are gone.
    type: float
    default: 60
  nvidia_smi:
    description: Path of nvidia-smi. Found on E(PATH) when not given.
    type: path
notes:
  - Memory is read from nvidia-smi's memory.used, not NVML's v1 memory info, which on an idle H200
    reported 615 MiB of reserved memory as used.
seealso:
  - module: gpuops.sglang.pct_exec_kill
'''

EXAMPLES = r'''
- name: Release every GPU on this host and prove it reads 0 MiB
  gpuops.sglang.gpu_release:

- name: Release GPUs on H100s that idle at 4 MiB, allowing a slow drain
  gpuops.sglang.gpu_release:
    max_used_mib: 8
    timeout: 120
    term_timeout: 30

- name: See who holds the GPUs without touching anything
  gpuops.sglang.gpu_release:
  check_mode: true
  register: holders
'''

RETURN = r'''
killed:
  description: Holders that were signalled (in check mode, would be), with the last signal sent.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 436, "cmdline": "python3 hold.py", "signal": "KILL"}]
excluded:
  description: Holders left alone, with the reason (V(exclude) pattern or V(self/ancestor)) and the devices they hold.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 88, "cmdline": "/usr/bin/nvidia-persistenced", "devices": ["/dev/nvidiactl"], "reason": "exclude"}]
gpus_before:
  description: GPUs as nvidia-smi reported them before anything was signalled.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
    uuid:
      description: GPU UUID.
      type: str
    memory_used_mib:
      description: memory.used in MiB.
      type: int
    memory_total_mib:
      description: memory.total in MiB.
      type: int
gpus:
  description: GPUs after the release (in check mode, the same as RV(gpus_before)).
  returned: always
  type: list
  elements: dict
devices:
  description: Device files that matched O(devices) and were scanned.
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds from the first signal until every GPU was at or under O(max_used_mib).
  returned: always
  type: float
compute_apps:
  description: nvidia-smi's compute apps when memory did not drain (empty otherwise), for the post-mortem.
  returned: always
  type: list
  elements: dict
cmd:
  description: The nvidia-smi argv used to read the GPUs.
  returned: always
  type: list
  elements: str
'''

import glob
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils._nvidia import (
    NVIDIA_DAEMON_EXCLUDES,
    NVIDIA_DEVICE_GLOBS,
    NvidiaSmiCommand,
    NvidiaSmiError,
    format_gpu_table,
    gpus_over,
    parse_compute_apps,
    parse_gpus,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._polling import poll_until
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import (
    LocalProcesses,
    compile_patterns,
    planned_kills,
    protected_pids,
    read_proc_record,
    terminate,
)

C_LOCALE = {'LANG': 'C', 'LC_ALL': 'C'}


class GpuReader(object):
    def __init__(self, module, nvidia_smi_path):
        self.module = module
        self.command = NvidiaSmiCommand(nvidia_smi_path)

    def _run(self, argv):
        rc, out, err = self.module.run_command(argv, environ_update=C_LOCALE)
        if rc != 0:
            # nvidia-smi prints its driver errors ("couldn't communicate with the NVIDIA driver") on stdout.
            raise NvidiaSmiError('%s failed (rc %d): %s' % (' '.join(argv), rc, (out + err).strip()))
        return out

    def gpus(self):
        return parse_gpus(self._run(self.command.query_gpus()))

    def compute_apps(self):
        try:
            return parse_compute_apps(self._run(self.command.query_compute_apps()))
        except NvidiaSmiError as exc:
            return [{'error': str(exc)}]


def expand_devices(patterns):
    paths = set()
    for pattern in patterns:
        for path in glob.glob(pattern):
            paths.add(path)
            paths.add(os.path.realpath(path))
    return sorted(paths)


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


def wait_for_free_memory(reader, max_used_mib, timeout):
    """Poll nvidia-smi until every GPU is at or under max_used_mib; return the last reading."""
    return poll_until(reader.gpus, lambda gpus: not gpus_over(gpus, max_used_mib), timeout,
                      first_interval=0.05, max_interval=1.0)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type='list', elements='str', default=NVIDIA_DEVICE_GLOBS),
            exclude=dict(type='list', elements='str', default=NVIDIA_DAEMON_EXCLUDES),
            term_timeout=dict(type='float', default=10.0),
            kill_timeout=dict(type='float', default=10.0),
            max_used_mib=dict(type='int', default=0),
            timeout=dict(type='float', default=60.0),
            nvidia_smi=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, killed=[], excluded=[], gpus_before=[], gpus=[], devices=[],
                  compute_apps=[], elapsed=0.0, cmd=[])

    for name in ('term_timeout', 'kill_timeout', 'timeout', 'max_used_mib'):
        if params[name] < 0:
            module.fail_json(msg='%s must not be negative' % name, **result)
    try:
        excludes = compile_patterns(params['exclude'], 'exclude pattern')
    except ValueError as exc:
        module.fail_json(msg=str(exc), **result)

    nvidia_smi = params['nvidia_smi'] or module.get_bin_path('nvidia-smi', required=False)
    if not nvidia_smi:
        module.fail_json(msg='nvidia-smi was not found on PATH; install the NVIDIA driver utilities '
                             'or set the nvidia_smi option', **result)
    reader = GpuReader(module, nvidia_smi)
    result['cmd'] = reader.command.query_gpus()

    try:
        result['gpus_before'] = reader.gpus()
    except NvidiaSmiError as exc:
        module.fail_json(msg='cannot read the GPUs before releasing them, nothing was killed: %s' % exc, **result)

    result['devices'] = expand_devices(params['devices'])
    local = LocalProcesses()
    targets, result['excluded'] = classify_holders(local.holders(result['devices']), excludes,
                                                   protected_pids())

    if module.check_mode:
        result['killed'] = planned_kills(targets, params['term_timeout'])
        result['changed'] = bool(targets)
        result['gpus'] = result['gpus_before']
        module.exit_json(**result)

    started = time.monotonic()
    outcome = terminate(local, targets, params['term_timeout'], params['kill_timeout'])
    result['killed'] = outcome.killed
    result['changed'] = bool(outcome.killed)
    if outcome.remaining:
        result['elapsed'] = round(time.monotonic() - started, 3)
        module.fail_json(msg='%d GPU holder(s) survived SIGKILL: %s' % (
            len(outcome.remaining), '; '.join(record.describe() for record in outcome.remaining)), **result)

    try:
        result['gpus'] = wait_for_free_memory(reader, params['max_used_mib'], params['timeout'])
    except NvidiaSmiError as exc:
        result['elapsed'] = round(time.monotonic() - started, 3)
        module.fail_json(msg='cannot read the GPUs after releasing them: %s' % exc, **result)
    result['elapsed'] = round(time.monotonic() - started, 3)

    busy = gpus_over(result['gpus'], params['max_used_mib'])
    if busy:
        result['compute_apps'] = apps = reader.compute_apps()
        still_holding = sorted(local.holders(result['devices']))
        module.fail_json(
            msg='GPU memory did not drain to <= %d MiB within %.1fs on GPU(s) %s. %s\n'
                'compute apps: %s; processes holding the devices now: %s. With no process left, '
                'memory that stays used is a driver-level leak: reset the GPU or reboot.'
                % (params['max_used_mib'], params['timeout'], ', '.join(str(gpu['index']) for gpu in busy),
                   format_gpu_table(result['gpus'], params['max_used_mib']), apps or 'none',
                   still_holding or 'none'),
            **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
