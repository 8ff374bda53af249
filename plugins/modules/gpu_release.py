#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: gpu_release
short_description: End every process holding the NVIDIA devices and prove the GPU memory is free
version_added: 0.1.0
description:
  - Finds the processes that hold the NVIDIA device files open or mapped by reading C(/proc/PID/fd) and
    C(/proc/PID/maps) (what C(fuser) does, without depending on it; C(fuser -v) was seen to miss the
    C(/dev/nvidia-caps) files a torch process held).
  - Refuses, before anything is signalled, a device pattern that matches a file which is not an NVIDIA
    device file (a name starting with C(nvidia), and a character device when under C(/dev)), and
    patterns that match nothing at all.
  - Stops them with SIGTERM, a wait of O(term_timeout) seconds and SIGKILL for the survivors, following
    each by PID and start time. Never signals itself, its parent processes, or the daemons matched by
    O(builtin_exclude) or O(exclude) (on the program they run and their uid, never on a name they can
    choose); an excluded daemon that holds a device is reported in RV(excluded).
  - Then reads the GPUs' memory until every GPU seen before the release is read and uses at most
    O(max_used_mib) MiB, with no fixed sleep, and fails with a per-GPU table and the remaining compute
    apps when O(memory_timeout) passes. The memory is read through NVML in the module's own process where
    nvidia-ml-py is installed, else with C(nvidia-smi --query-gpu=index,uuid,memory.used,memory.total)
    (see O(memory_reader)). A GPU that cannot be read before
    the release (C([N/A]), C(Unknown Error)) is reported and does not stop the release; after it, an
    unreadable GPU is never taken as free.
  - Every nvidia-smi call and every NVML reading runs under O(command_timeout); a hung one ends the
    wait and the failure says what was and was not signalled.
  - Replaces C(fuser -k /dev/nvidia*; sleep 2; nvidia-smi | grep 0MiB), which killed the NVIDIA daemons,
    missed C(/dev/nvidia-caps), guessed the wait, and could not tell a free GPU from a busy one.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.await_exit
  - gpuops.sglang.guard_lease
attributes:
  check_mode:
    support: full
    details: Reports the holders that would be killed (RV(killed), and with their users and GPUs RV(targets)) and the current GPU memory; signals nothing.
  diff_mode:
    support: none
    details: Not applicable; the module acts on processes, not on files.
  platform:
    platforms: posix
options:
  devices:
    description: Glob patterns of the device files whose holders are ended.
    type: list
    elements: str
    default: ['/dev/nvidia[0-9]*', '/dev/nvidiactl', '/dev/nvidia-uvm*', '/dev/nvidia-caps/*']
  exclude:
    description:
      - More daemons to leave alone, B(added to) O(builtin_exclude).
      - Python regular expressions searched in the real path of the program a holder runs
        (C(/proc/PID/exe), symlinks resolved) and in that path's base name, for example
        V(^my-gpu-exporter$) or V(^/usr/bin/my-gpu-exporter$).
      - A holder is left alone only when a pattern matches B(and) it runs as root or as a system user
        (each of its real, effective, saved and filesystem uids at most 999, the system range of
        C(login.defs)). A process run by a person is always stopped, whatever it is called.
      - The command name (C(/proc/PID/comm)) and the command line are never matched, for any user can set
        them (C(exec -a), a symlink named like the daemon, C(prctl), setproctitle) and would then keep
        GPU memory through a release and fail its proof.
      - The module needs root to read another user's C(/proc/PID/exe); a holder whose program cannot
        be read is not excluded.
    type: list
    elements: str
    default: []
  builtin_exclude:
    description:
      - The NVIDIA daemons that hold the devices by design and are never killed (persistence daemon,
        fabric manager, DCGM, the X server), matched as O(exclude) is, on the program's real path and
        on root or a system uid.
      - Setting this B(replaces) the built-in list; V([]) leaves no daemon protected. To protect one
        more daemon, use O(exclude) instead, which keeps these.
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
      - The role passes C(sglang_gpu_max_used_mib), V(64) by default there, above every idle reading measured with a
        margin and well below the about 530 MiB one process's CUDA context holds until it exits, so a process
        left on the GPU still fails the release. A release that fails with no process left names each GPU's
        reading and this threshold.
    type: int
    default: 0
  memory_timeout:
    description: Seconds the GPU memory may take to drain after the holders are gone (M(gpuops.sglang.sglang_guard)'s too).
    type: float
    default: 60
  command_timeout:
    description:
      - Seconds any one nvidia-smi call may take before it is killed (a wedged driver hangs it).
        The module then fails, saying which processes were already signalled.
    type: float
    default: 30
  nvidia_smi:
    description: Path of nvidia-smi. Found on E(PATH) when not given.
    type: path
  memory_reader:
    description:
      - How the GPU memory is read.
      - V(nvml) reads NVML's v2 memory info in this module's process through nvidia-ml-py (C(pynvml)),
        polling every 20 ms; it fails when nvidia-ml-py or NVML cannot be used.
      - V(nvidia-smi) runs C(nvidia-smi --query-gpu) for each reading, polling every 0.05 s and less
        often (up to 0.25 s) while the memory does not go down.
      - V(auto) uses NVML where it works (nvidia-ml-py installed, NVML initialised, and a first v2 reading of
        GPU 0 answered, which a driver older than v2 memory info does not) and nvidia-smi otherwise.
      - Either way every GPU seen before the release must be read and at or under O(max_used_mib).
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
notes:
  - Memory is nvidia-smi's memory.used or NVML's v2 memory info (used, rounded up to whole MiB), never
    NVML's v1 memory info, which on an idle H200 reported 615 MiB of reserved memory as used.
  - On an H200 an nvidia-smi reading started while the driver was freeing a killed holder's memory
    took 1.0 to 1.2 s, 4 releases in 60; NVML readings in the module's process never took over 0.03 s.
seealso:
  - module: gpuops.sglang.pct_exec_kill
'''

EXAMPLES = r'''
- name: Release every GPU on this host and prove it reads 0 MiB
  gpuops.sglang.gpu_release:

- name: Release GPUs on H100s that idle at 4 MiB, allowing a slow drain
  gpuops.sglang.gpu_release:
    max_used_mib: 8
    memory_timeout: 120
    term_timeout: 30

- name: Protect one more GPU daemon, keeping the built-in list of NVIDIA daemons
  gpuops.sglang.gpu_release:
    exclude:
      - '^/usr/local/bin/my-gpu-exporter$'
    command_timeout: 10

- name: See who holds the GPUs without touching anything
  gpuops.sglang.gpu_release:
  check_mode: true
  register: holders
'''

RETURN = r'''
awaited:
  description: The wait for O(await_exit), before anything else was signalled.
  returned: always
  type: dict
  contains:
    pids:
      description: The PIDs asked for (none in check mode, which does not wait).
      type: list
      elements: int
    waited_s:
      description: Seconds waited (0 when nothing was awaited).
      type: float
    still_running:
      description: The PIDs still running when O(term_timeout) had passed (then sent SIGKILL).
      type: list
      elements: int
    gone_at:
      description: When none of them ran any more (seconds since the epoch, host clock); null when nothing was awaited or some survived SIGKILL.
      type: float
  sample: {pids: [4711, 4712], waited_s: 0.31, still_running: [], gone_at: 1796083109.74}
killed:
  description:
    - Holders that were signalled (in check mode, would be), with the last signal sent.
    - First, the processes of O(await_exit) that were still running after O(term_timeout) and got SIGKILL.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID of the holder.
      type: int
    cmdline:
      description: Full command line of the holder.
      type: str
    signal:
      description: Last signal sent, V(TERM) or V(KILL).
      type: str
  sample: [{"pid": 436, "cmdline": "python3 hold.py", "signal": "KILL"}]
targets:
  description:
    - The holders found on the devices and not left alone, as seen before any signal to them - in check mode, what a
      release would end. The processes of O(await_exit) are not among them (the server's own stop ends those).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID of the holder.
      type: int
    user:
      description: The name of its effective user, from C(/proc/PID/status) (its uid where the host has no account for it); null when unreadable.
      type: str
    cmdline:
      description: Full command line of the holder.
      type: str
    gpus:
      description: The device minors of the GPUs it holds (C(/dev/nvidiaN)); C(nvidia-smi -q) shows each GPU's C(Minor Number).
      type: list
      elements: int
  sample: [{"pid": 436, "user": "alice", "cmdline": "python3 hold.py", "gpus": [0, 1]}]
excluded:
  description: Holders left alone, with the reason (V(exclude) pattern or V(self/ancestor)) and the devices they hold.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID of the holder.
      type: int
    cmdline:
      description: Full command line of the holder.
      type: str
    executable:
      description: The real path of the program it runs (C(/proc/PID/exe)); null when it could not be read.
      type: str
    devices:
      description: The device files it holds open or mapped.
      type: list
      elements: str
    reason:
      description: V(exclude) (matched O(builtin_exclude) or O(exclude)) or V(self/ancestor) (this module or a parent of it).
      type: str
  sample: [{"pid": 88, "cmdline": "/usr/bin/nvidia-persistenced", "executable": "/usr/bin/nvidia-persistenced",
            "devices": ["/dev/nvidiactl"], "reason": "exclude"}]
gpus_before:
  description: GPUs as nvidia-smi reported them before anything was signalled.
  returned: always
  type: list
  elements: dict
  contains: &gpu_record
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
    error:
      description:
        - Why this GPU could not be read (C([N/A]), C(Unknown Error), a line that is not CSV), null when
          it was. An unreadable line has a null RV(gpus_before[].index).
      type: str
gpus:
  description: GPUs after the release (in check mode, the same as RV(gpus_before)).
  returned: always
  type: list
  elements: dict
  # the same records as gpus_before
  contains: *gpu_record
devices:
  description: Device files that matched O(devices) and were scanned (each with its real path).
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds from the first signal to a holder until every GPU was at or under O(max_used_mib) (the wait for O(await_exit) not included).
  returned: always
  type: float
compute_apps:
  description: nvidia-smi's compute apps when memory did not drain (empty otherwise), for the post-mortem.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID as nvidia-smi reports it (the host's PID namespace).
      type: int
    process_name:
      description: Process name as nvidia-smi reports it.
      type: str
    used_memory_mib:
      description: GPU memory it uses in MiB; null when nvidia-smi cannot say (C([N/A])).
      type: int
  sample: [{"pid": 436, "process_name": "python3", "used_memory_mib": 20610}]
cmd:
  description:
    - The nvidia-smi argv used to read the GPUs (each call also runs under coreutils C(timeout)).
    - Empty when the memory was read through NVML (RV(memory_reader)).
  returned: always
  type: list
  elements: str
memory_reader:
  description: What read the GPU memory, V(NVML) or V(nvidia-smi) (see O(memory_reader)).
  returned: always
  type: str
  sample: NVML
timeline:
  description:
    - Where the time went, for a release slower than the driver's own. Each signal, each GPU reading
      and each change in how many signalled holders are still alive in C(/proc), plus when this
      module's process and its main function started.
    - At most 200 entries; an entry V(truncated) says how many more were left out.
  returned: always
  type: list
  elements: dict
  contains:
    at:
      description: Seconds from the first signal to a holder (where RV(elapsed) starts; negative before it, such as the module's start).
      type: float
    event:
      description:
        - V(process start), V(module start), V(signal), V(poll) (holders still alive), V(holders gone)
          (the first poll that found none of them), V(gpu reading), V(memory free) (where RV(elapsed) ends)
          or V(truncated).
      type: str
    took:
      description: Seconds the entry took (a GPU reading, a /proc poll); null for an instant.
      type: float
    detail:
      description: What was signalled, read or found.
      type: str
  sample: [{"at": 0.0, "event": "signal", "took": null, "detail": "SIGKILL to pid 436"},
           {"at": 0.121, "event": "holders gone", "took": 0.0, "detail": "0 of 1 alive (/proc poll 6)"},
           {"at": 0.122, "event": "gpu reading", "took": 0.024, "detail": "nvidia-smi: GPU 0 0 MiB"},
           {"at": 0.146, "event": "memory free", "took": null, "detail": ""}]
'''

import time
from re import Pattern
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils._module import (
    fail,
    new_result,
    require_not_negative,
    require_positive,
    run_module,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import (
    NVIDIA_DAEMON_EXCLUDES,
    NVIDIA_DEVICE_GLOBS,
    DeviceError,
    FreeMemoryProof,
    GpuReader,
    NvidiaSmiError,
    expand_devices,
    unreadable,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    Termination,
    await_exit,
    compile_patterns,
    nothing_awaited,
    planned_kills,
    signalled_summary,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import LocalProcesses, described, protected_pids
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import (
    MemoryReader,
    NvmlUnavailable,
    Timeline,
    TracedProcesses,
    TracedReader,
    choose_reader,
    classify_holders,
    not_free_message,
    process_started_at,
)

ARGUMENT_SPEC = dict(
    devices=dict(type='list', elements='str', default=NVIDIA_DEVICE_GLOBS),
    exclude=dict(type='list', elements='str', default=[]),
    builtin_exclude=dict(type='list', elements='str', default=NVIDIA_DAEMON_EXCLUDES),
    term_timeout=dict(type='float', default=10.0),
    kill_timeout=dict(type='float', default=10.0),
    max_used_mib=dict(type='int', default=0),
    # One name with sglang_guard's; `timeout`, its name before, still works.
    memory_timeout=dict(type='float', default=60.0),
    command_timeout=dict(type='float', default=30.0),
    nvidia_smi=dict(type='path'),
    memory_reader=dict(type='str', default='auto', choices=['auto', 'nvml', 'nvidia-smi']),
    await_exit=dict(type='list', elements='int', default=[]),
    guard=GUARD_OPTION,
)


def release_bound(params: dict[str, Any]) -> float:
    """Seconds the release may take: two readings, the wait for the stopping server, the kill, the proof."""
    return (2 * params['command_timeout'] + (params['term_timeout'] + params['kill_timeout'] if params['await_exit'] else 0)
            + params['term_timeout'] + params['kill_timeout'] + params['memory_timeout'])


def validated_excludes(params: dict[str, Any]) -> list[Pattern]:
    """The compiled exclude patterns, once every option is known to be usable."""
    require_not_negative(params, ('term_timeout', 'kill_timeout', 'memory_timeout', 'max_used_mib'))
    require_positive(params, 'command_timeout')
    try:
        return compile_patterns(params['builtin_exclude'] + params['exclude'], 'exclude pattern')
    except ValueError as exc:
        fail(str(exc))


def gpu_reader(module: AnsibleModule) -> MemoryReader:
    """The memory reader memory_reader asks for (NVML or nvidia-smi), nvidia-smi also for compute apps."""
    params = module.params
    nvidia_smi = params['nvidia_smi'] or module.get_bin_path('nvidia-smi', required=False)
    smi = GpuReader(CommandRunner(module, params['command_timeout']), nvidia_smi) if nvidia_smi else None
    try:
        reader, why = choose_reader(params['memory_reader'], smi, params['command_timeout'])
    except (NvmlUnavailable, NvidiaSmiError) as exc:
        fail('%s; nothing was signalled' % exc)
    if why is not None and params['memory_reader'] == 'auto':
        module.debug('gpu_release reads the memory with nvidia-smi: %s' % why)
    return reader


def read_before(module: AnsibleModule, reader: TracedReader, result: dict[str, Any]) -> list[int]:
    """gpus_before; the indices the proof afterwards must read again."""
    try:
        result['gpus_before'] = reader.gpus()
    except (CommandError, NvidiaSmiError) as exc:
        fail('cannot read the GPUs before releasing them, nothing was signalled: %s' % exc)
    for gpu in unreadable(result['gpus_before']):
        # Informational before the kill: the proof afterwards must read every GPU anyway.
        module.warn('before the release, GPU %s could not be read: %s' % (
            gpu['index'] if gpu['index'] is not None else '?', gpu['error']))
    return [gpu['index'] for gpu in result['gpus_before'] if gpu['index'] is not None]


def await_stopping(module: AnsibleModule, local: TracedProcesses, result: dict[str, Any]) -> list[Any]:
    """Wait for the stopping server's processes (await_exit); the ones that needed SIGKILL."""
    params = module.params
    if not params['await_exit'] or module.check_mode:
        return []
    # gpus_before is read first: it shows what the stopping server still held.
    awaited = await_exit(local, params['await_exit'], params['term_timeout'], params['kill_timeout'])
    result['awaited'] = awaited.report
    result['killed'] = awaited.killed
    result['changed'] = bool(awaited.killed)
    if awaited.failure():
        fail('%s; nothing else was signalled' % awaited.failure())
    return awaited.killed


def end_holders(module: AnsibleModule, local: TracedProcesses, targets: list[Any], ended_early: list[Any],
                result: dict[str, Any], timeline: Timeline) -> float:
    """SIGTERM, then SIGKILL for the survivors; returns when the kill began (monotonic clock)."""
    params = module.params
    started = timeline.origin = timeline.clock()
    outcome = Termination(local, params['term_timeout'], params['kill_timeout']).run(targets)
    result['killed'] = ended_early + outcome.killed
    result['changed'] = bool(result['killed'])
    if outcome.remaining:
        result['elapsed'] = round(time.monotonic() - started, 3)
        fail('%d GPU holder(s) survived SIGKILL: %s' % (
            len(outcome.remaining), '; '.join(record.describe() for record in outcome.remaining)))
    return started


def prove_free(module: AnsibleModule, reader: TracedReader, local: TracedProcesses, expected: list[int], started: float,
               result: dict[str, Any], timeline: Timeline) -> None:
    params = module.params
    proof = FreeMemoryProof(reader, params['max_used_mib'], expected)
    result['gpus'] = proof.wait(params['memory_timeout'])
    result['elapsed'] = round(time.monotonic() - started, 3)
    timeline.add('memory free' if proof.free() else 'memory not proven free')
    if proof.timed_out is not None:
        fail('cannot prove the GPU memory free: %s; %s. A hung nvidia-smi usually means a wedged '
             'driver: see dmesg (Xid errors) on this host.' % (proof.timed_out, signalled_summary(result['killed'])))
    if proof.free():
        return
    result['compute_apps'] = reader.compute_apps()
    fail(not_free_message(proof, params['memory_timeout'], result['killed'], result['compute_apps'],
                          sorted(local.holders(result['devices']))))


def release(module: AnsibleModule, result: dict[str, Any], timeline: Timeline) -> None:
    params = module.params
    excludes = validated_excludes(params)
    lease = Renewer.from_option(None if module.check_mode else params['guard'], 'gpu_release')
    lease.renew(release_bound(params))
    try:
        result['devices'] = expand_devices(params['devices'])
    except DeviceError as exc:
        fail('%s; nothing was signalled' % exc)
    reader = TracedReader(gpu_reader(module), timeline)
    result['cmd'], result['memory_reader'] = reader.cmd(), reader.source_name
    try:
        release_with(module, result, timeline, excludes, lease, reader)
    finally:
        reader.close()


def release_with(module: AnsibleModule, result: dict[str, Any], timeline: Timeline, excludes: list[Pattern],
                 lease: Renewer, reader: TracedReader) -> None:
    params = module.params
    expected = read_before(module, reader, result)
    local = TracedProcesses(LocalProcesses(), timeline)
    ended_early = await_stopping(module, local, result)
    holders = local.holders(result['devices'])
    targets, result['excluded'] = classify_holders(holders, excludes, protected_pids())
    result['targets'] = [described(record, devices=holders[record.pid]) for record in targets]
    if module.check_mode:
        result.update(killed=planned_kills(targets, params['term_timeout']), changed=bool(targets),
                      gpus=result['gpus_before'])
        return
    started = end_holders(module, local, targets, ended_early, result, timeline)
    prove_free(module, reader, local, expected, started, result, timeline)
    lease.done()


def main() -> None:
    timeline = Timeline()
    process_start = process_started_at(timeline.clock)
    if process_start is not None:
        timeline.add('process start', at=process_start)
    timeline.add('module start')
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = new_result(killed=[], targets=[], excluded=[], gpus_before=[], gpus=[], devices=[], compute_apps=[], elapsed=0.0,
                        cmd=[], memory_reader='', awaited=nothing_awaited(), timeline=[])
    # LeaseError: the guard restored while this ran; its message says so.
    run_module(module, result, lambda: release(module, result, timeline), errors=(LeaseError,),
               finish=lambda result: result.update(timeline=timeline.report()))


if __name__ == '__main__':
    main()
