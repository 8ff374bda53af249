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
  - With O(gpus) set, releases those GPUs alone, for a server that shares its machine with others (see O(gpus)).
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
  gpus:
    description:
      - The GPUs to release, as nvidia-smi's indices (PCI bus order, V(0), V(1)) or UUIDs (V(GPU-...)); MIG
        instances cannot be named. The role passes C(sglang_gpus).
      - Empty (the default) releases every GPU of the machine, every holder of O(devices) is ended.
      - Set, each GPU's device file C(/dev/nvidiaN) is found by its minor number N, read from the driver's
        information of the GPU's PCI bus id (see O(driver_info)), never taken to equal the index. Then only
        holders of those device files are ended. A holder of any GPU outside them, even one that holds one of
        them too, is a neighbour's or a foreign job's and is spared; so is a holder of the shared files alone
        (C(nvidiactl), C(nvidia-uvm), C(nvidia-caps)) unless it is the stopping server's (a process of
        O(await_exit), a descendant of one, or of its session, as read before the wait). Both are listed in
        RV(spared).
      - Set, the proof covers those GPUs alone, and is stronger than memory - each must read at most
        O(max_used_mib) B(and) have no compute process left (NVML's running process list where NVML reads the
        memory, else C(nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid)).
      - A GPU the machine does not have, or one without driver information, fails the task before anything is
        signalled.
    type: list
    elements: str
    default: []
  driver_info:
    description:
      - The folder of the NVIDIA driver's per-GPU information, one folder per PCI bus id holding a file
        C(information) with C(Device Minor) and C(GPU UUID) lines. Read only with O(gpus) set.
      - Only a test or simulated host points this elsewhere.
    type: path
    default: /proc/driver/nvidia/gpus
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

- name: Release GPUs 0 and 1 only, for a server sharing its machine, awaiting its stopping processes
  gpuops.sglang.gpu_release:
    gpus: [0, 1]
    await_exit: "{{ stopped.stopping }}"
    max_used_mib: 64
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
  description: Holders left alone, with why (V(exclude) pattern or V(self/ancestor)) and the devices they hold.
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
    why:
      description: V(exclude) (matched O(builtin_exclude) or O(exclude)) or V(self/ancestor) (this module or a parent of it).
      type: str
  sample: [{"pid": 88, "cmdline": "/usr/bin/nvidia-persistenced", "executable": "/usr/bin/nvidia-persistenced",
            "devices": ["/dev/nvidiactl"], "why": "exclude"}]
spared:
  description:
    - With O(gpus) set, the holders left alone as not this release's to end, with why; empty otherwise.
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
    devices:
      description: The device files it holds open or mapped.
      type: list
      elements: str
    gpus:
      description: The device minors of the GPUs it holds (C(/dev/nvidiaN)).
      type: list
      elements: int
    why:
      description:
        - V(other GPUs) - it holds a GPU outside O(gpus) (a neighbour's or a foreign job's, maybe on these GPUs too).
        - V(shared devices only) - it holds no GPU's device file, only the shared ones, and is not the stopping
          server's (O(await_exit)).
      type: str
  sample: [{"pid": 5120, "cmdline": "python3 other_model.py", "devices": ["/dev/nvidia1", "/dev/nvidiactl"],
            "gpus": [1], "why": "other GPUs"}]
scope:
  description: With O(gpus) set, the GPUs released, as resolved on the host; empty when every GPU is.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi's index.
      type: int
    uuid:
      description: GPU UUID.
      type: str
    bus_id:
      description: PCI bus id, as the driver's information folder names it.
      type: str
    minor:
      description: The device minor (C(/dev/nvidiaN)), from the driver's information.
      type: int
  sample: [{"index": 0, "uuid": "GPU-4b5c2a41-93c7-4f1e-8d0a-5b6c7d8e9f01", "bus_id": "0000:18:00.0", "minor": 0}]
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
  description:
    - nvidia-smi's compute apps when memory did not drain (empty otherwise), for the post-mortem.
    - With O(gpus) set, those on these GPUs (from NVML where it reads the memory, without a process name), each
      with RV(compute_apps[].gpu_uuid), when the proof failed.
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
    gpu_uuid:
      description: The GPU it runs on; only with O(gpus) set.
      type: str
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
        - With O(gpus) set also V(gpus located) (their indices and minors) and V(compute apps) (those left on
          them, read once their memory reads free).
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import (
    RELEASE_SPEC,
    GpuRelease,
    ReleaseFailed,
    Timeline,
    empty_result,
    process_started_at,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._module import new_result, run_module

ARGUMENT_SPEC = dict(
    RELEASE_SPEC,
    await_exit=dict(type='list', elements='int', default=[]),
    guard=GUARD_OPTION,
)


def release(module: AnsibleModule, result: dict, timeline: Timeline) -> None:
    params = module.params
    lease = Renewer.from_option(None if module.check_mode else params['guard'], 'gpu_release')
    GpuRelease(module, params, module.check_mode, timeline).run(result, params['await_exit'], lease)


def main() -> None:
    timeline = Timeline()
    process_start = process_started_at(timeline.clock)
    if process_start is not None:
        timeline.add('process start', at=process_start)
    timeline.add('module start')
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = new_result(**empty_result())
    # LeaseError: the guard restored while this ran; its message says so.
    run_module(module, result, lambda: release(module, result, timeline), errors=(LeaseError, ReleaseFailed),
               finish=lambda result: result.update(timeline=timeline.report()))


if __name__ == '__main__':
    main()
