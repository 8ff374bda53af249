# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_release's domain: which holders of the NVIDIA devices to stop, and what a failed release says.

Domain layer, over the /proc reader (_procfs) and the nvidia-smi proof (_nvidia).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.sglang.plugins.module_utils._nvidia import format_gpu_table, unreadable
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import is_excluded_daemon, signalled_summary
from ansible_collections.gpuops.sglang.plugins.module_utils._procfs import read_identity, read_proc_record


def classify_holders(holders, excludes, guarded, proc_root='/proc'):
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
