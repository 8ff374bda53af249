#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: pct_exec_kill
short_description: Stop the SGLang processes inside a Proxmox VE LXC container
version_added: 0.1.0
description:
  - Runs on a Proxmox VE node. Lists the processes of container O(vmid) by reading the container's
    C(/proc) with C(pct exec VMID -- /bin/sh -c SCRIPT) (no C(ps) needed, so busybox and minimal
    templates work), selects those whose full command line matches O(kill_patterns), and stops them with
    SIGTERM, a wait of O(term_timeout) seconds, then SIGKILL for the survivors.
  - Lists again on every poll; a new match (a child forked during shutdown, a respawn) becomes a target
    of the current round. Each signalled process is followed by PID and start time until it is gone, so
    one that changes its command line on SIGTERM still gets SIGKILL.
  - Succeeds only when a final listing shows no matching process; otherwise fails naming each survivor
    with its state.
  - Never signals the container's PID 1 (a warning says when it matches) or its own listing and
    signalling shells.
  - With O(marks) or O(neighbours), ends only the stopping server's processes, never a neighbour's in the same
    container and under the same user - a match that carries another server's marks (another C(--port), another
    launch file or service in its environment, a neighbour's unit) is listed in RV(spared) and never signalled, and one
    that carries nothing telling whose it is, nor do its parents, is spared too while O(neighbours) are given.
  - Every pct call runs under O(command_timeout); a hung one (a frozen container) is killed and the
    failure says which processes were and were not signalled.
  - The scripts are fixed text and every variable part (PIDs, signal) is a separate argument; no shell
    string is assembled from input, so nothing is re-quoted through ssh, pct and C(bash -c).
  - Replaces the manual C(ps aux | grep python3 | xargs kill -9), which also killed unrelated Python
    processes and listed some PIDs twice.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.await_exit
  - gpuops.sglang.neighbours
attributes:
  check_mode:
    support: full
    details: Lists what would be killed (same RV(killed) list; RV(targets) with each process's user) and signals nothing.
  diff_mode:
    support: none
    details: Not applicable; the module acts on processes, not on files.
  platform:
    platforms: posix
options:
  vmid:
    description: ID of the LXC container whose processes are stopped.
    type: int
    required: true
  kill_patterns:
    description:
      - Python regular expressions searched in each process's full command line (not the 15-character
        C(comm), which cuts C(sglang::scheduler) to C(sglang::schedul)).
      - The default matches what SGLang runs, anchored at the start of the command line; its C(sglang::)
        children's titles, and a Python interpreter running C(-m sglang.launch_server), C(-m sglang.bench_*),
        C(-m sglang.srt.*) or C(-m sglang.data_parallel*), and the C(sglang serve) console script of newer
        releases. Upstream's own cleanup searches the bare
        substrings, which also match an editor or a C(tail -f) whose arguments merely name them.
      - An empty list, or an empty pattern (which matches every process), is refused.
    type: list
    elements: str
    default: ['^sglang::', '^(\S*/)?python[0-9.]*( -[WX] \S+| -[^m ]\S*)* -m ?sglang\.(launch_server|bench_\w+|srt(\.\w+)+|data_parallel\w*)( |$)',
              '^((\S*/)?python[0-9.]*( -\S+)* )?(\S*/)?sglang serve( |$)']
  term_timeout:
    description:
      - Seconds to wait after SIGTERM before SIGKILL. SGLang drains its requests on SIGTERM and then
        stops its children; a parent killed with SIGKILL can leave schedulers holding GPU memory.
      - V(0) sends SIGKILL at once.
    type: float
    default: 10
  kill_timeout:
    description: Seconds to wait after SIGKILL before reporting a process that will not die.
    type: float
    default: 10
  command_timeout:
    description: Seconds any one pct call may take before it is killed (a frozen container hangs it).
    type: float
    default: 30
  pct:
    description: Path of the pct binary. Found on E(PATH) when not given.
    type: path
  marks:
    description:
      - What marks the stopping server's processes - its V(service_name) (its unit, or the service mark of a detached
        start), its V(port) (C(--port) in its command line), its V(launch_file) (the launch file mark), V(name) for
        messages. A match carrying one of them that differs is another server's, and spared.
      - Unset (and no O(neighbours)), every match is ended, as on a container the server owns.
    type: dict
    suboptions:
      service_name:
        description: Its service name.
        type: str
      port:
        description: The port it serves on.
        type: int
      launch_file:
        description: Its launch configuration, as the container sees it.
        type: path
      name:
        description: How messages call it (its inventory host).
        type: str
        default: ''
requirements:
  - C(/bin/sh) and C(tr) inside the container (dash, bash or busybox; no procps).
notes:
  - Processes are identified by PID and start time, checked inside the container in the same shell that
    sends the signal, so a PID reused by a new process between listing and signalling is never signalled.
seealso:
  - module: gpuops.sglang.gpu_release
'''

EXAMPLES = r'''
- name: Stop SGLang inside container 101
  gpuops.sglang.pct_exec_kill:
    vmid: 101

# With several servers in one container: the children's sglang:: titles name no port, so they are told apart by
# what they inherited (the marks of a detached start, the unit's control group) or by their parent's --port.
- name: Stop only what is left of the server on port 30000, sparing its neighbour on port 30001
  gpuops.sglang.pct_exec_kill:
    vmid: "{{ pve_vmid }}"
    marks: {service_name: sglang, port: 30000, launch_file: /etc/sglang/launch.json, name: gpu1}
    neighbours:
      - {service_name: sglang-b, port: 30001, launch_file: /etc/sglang-b/launch.json, name: gpu1b}
    term_timeout: 60
  delegate_to: "{{ pve_node }}"
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
    - Processes that matched and were signalled (in check mode, would be), with the last signal sent.
    - First, the processes of O(await_exit) that were still running after O(term_timeout) and got SIGKILL.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID inside the container.
      type: int
    cmdline:
      description: Full command line.
      type: str
    signal:
      description: Last signal sent, V(TERM) or V(KILL).
      type: str
  sample: [{"pid": 412, "cmdline": "python3 -m sglang.launch_server --port 30000", "signal": "TERM"}]
targets:
  description:
    - The matching processes of the first listing, before any signal to them - in check mode, what would be
      stopped. The processes of O(await_exit) are not among them.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID inside the container.
      type: int
    user:
      description:
        - The name of its effective user in the container (its uid where the container's C(/etc/passwd) has no
          account for it). Read only in check mode (the listing is polled while a server drains); null otherwise.
      type: str
    cmdline:
      description: Full command line.
      type: str
    gpus:
      description: Always empty (M(gpuops.sglang.gpu_release) names the GPU holders).
      type: list
      elements: int
  sample: [{"pid": 412, "user": "root", "cmdline": "python3 -m sglang.launch_server --port 30000", "gpus": []}]
spared:
  description:
    - Matching processes that are another server's (O(marks), O(neighbours)), never signalled, each with why; the
      first listing's and any a later listing found.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID inside the container.
      type: int
    cmdline:
      description: Full command line.
      type: str
    why:
      description: What it carries that is another server's, or why nobody can tell whose it is.
      type: str
  sample:
    - pid: 530
      cmdline: "sglang::scheduler_TP0"
      why: "its parent 512 carries the marks of the neighbour server gpu1b (port 30001): its command line serves --port 30001"
remaining:
  description: >-
    Matching processes of the stopping server in the final listing (signalled or not), RV(spared) ones left out; the
    module fails when this is not empty.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID inside the container.
      type: int
    cmdline:
      description: Full command line.
      type: str
    state:
      description: Process state letter from C(/proc/PID/stat) (for example V(S), V(D), V(Z)).
      type: str
  sample: []
cmd:
  description: The argv lists run through pct, in order (each also runs under coreutils C(timeout)).
  returned: always
  type: list
  elements: list
vmid:
  description: The container acted on.
  returned: always
  type: int
elapsed:
  description:
    - Seconds from the first signal until no matching process was left (0 when none was signalled); on a
      failure, until the failure.
  returned: always
  type: float
'''

import time
from re import Pattern
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, require_positive, run_module
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._pct import ContainerProcesses, PctCommand, parse_status
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    DEFAULT_SGLANG_PATTERNS,
    MARKS_SPEC,
    NEIGHBOURS_OPTION,
    ProcessRecord,
    ProcessSourceError,
    ServerMarks,
    ServerOwnership,
    Termination,
    TerminationOutcome,
    await_exit,
    compile_patterns,
    merge_spared,
    nothing_awaited,
    planned_kills,
    select,
    signalled_summary,
)

ARGUMENT_SPEC = dict(
    vmid=dict(type='int', required=True),
    # One name with sglang_server and sglang_guard for SGLang's command lines.
    kill_patterns=dict(type='list', elements='str', default=DEFAULT_SGLANG_PATTERNS),
    term_timeout=dict(type='float', default=10.0),
    kill_timeout=dict(type='float', default=10.0),
    command_timeout=dict(type='float', default=30.0),
    pct=dict(type='path'),
    await_exit=dict(type='list', elements='int', default=[]),
    marks=dict(type='dict', options=dict(MARKS_SPEC)),
    neighbours=NEIGHBOURS_OPTION,
)


def remaining_entry(record: ProcessRecord) -> dict[str, Any]:
    return {'pid': record.pid, 'cmdline': record.cmdline, 'state': record.state}


def target_entry(record: ProcessRecord, users: dict[str, Any]) -> dict[str, Any]:
    """A matching process as first listed: {pid, user, cmdline, gpus} (no GPUs: gpu_release names the holders)."""
    return {'pid': record.pid, 'user': users.get(record.pid), 'cmdline': record.cmdline, 'gpus': []}


def validated_patterns(params: dict[str, Any]) -> list[Pattern]:
    if not params['kill_patterns']:
        fail('kill_patterns is empty: give at least one regular expression for the command lines '
             'to stop (the default matches SGLang)')
    if any(not pattern.strip() for pattern in params['kill_patterns']):
        fail('an empty pattern matches every process in the container; refusing it')
    try:
        patterns = compile_patterns(params['kill_patterns'])
    except ValueError as exc:
        fail(str(exc))
    if params['term_timeout'] < 0 or params['kill_timeout'] < 0:
        fail('term_timeout and kill_timeout must not be negative')
    require_positive(params, 'command_timeout')
    return patterns


def running_container(module: AnsibleModule, result: dict[str, Any]) -> ContainerProcesses:
    """The container's processes through pct exec, once pct says the container runs."""
    params = module.params
    pct_path = params['pct'] or module.get_bin_path('pct', required=False)
    if not pct_path:
        fail('pct was not found on PATH; is this a Proxmox VE node? Set the pct option to its path.')
    runner = CommandRunner(module, params['command_timeout'])
    result['cmd'] = runner.cmd
    pct = PctCommand(pct_path, params['vmid'])
    try:
        status_run = runner.run(pct.status())
    except CommandError as exc:
        fail('%s; nothing was signalled' % exc)
    if status_run.timed_out:
        fail('%s; nothing was signalled' % status_run.describe())
    status = parse_status(status_run.stdout) if status_run.rc == 0 else None
    if status != 'running':
        state = ('is %s' % status) if status else 'does not exist or cannot be queried (rc %d: %s)' % (
            status_run.rc, status_run.output or 'no output')
        fail('container %d %s; nothing was killed' % (params['vmid'], state))
    return ContainerProcesses(runner, pct, with_users=module.check_mode, with_marks=ownership(params).judges)


def ownership(params: dict[str, Any]) -> ServerOwnership:
    """Whose each match is (the stopping server's, a neighbour's), from the marks and neighbours options."""
    return ServerOwnership(ServerMarks.from_option(params['marks']) if params['marks'] else None,
                           [ServerMarks.from_option(neighbour) for neighbour in params['neighbours']])


def matching(container: ContainerProcesses, patterns: list[Pattern], owners: ServerOwnership,
             listing: list[ProcessRecord], result: dict[str, Any], module: AnsibleModule | None = None) -> list[Any]:
    """The processes to stop; another server's land in result's spared, a match that is the container's init is
    only warned about (module: the first listing, not each rescan)."""
    for record in listing:
        if module and record.pid in container.PROTECTED and any(pattern.search(record.cmdline) for pattern in patterns):
            module.warn('pid %d in container %d (%s) matches the patterns but is the container\'s init; '
                        'it is never signalled (stop the container instead)'
                        % (record.pid, module.params['vmid'], record.cmdline))
    targets, spared = owners.sort(select(listing, patterns, protected_pids=container.PROTECTED), listing)
    merge_spared(result['spared'], spared)
    return targets


def kill(module: AnsibleModule, container: ContainerProcesses, patterns: list[Pattern],
         result: dict[str, Any]) -> tuple[list[Any], TerminationOutcome | None, float]:
    """(what await_exit ended, the termination's outcome or None when nothing matched, when it began)."""
    params = module.params
    owners = ownership(params)
    termination = Termination(container, params['term_timeout'], params['kill_timeout'],
                              rescan=lambda listing: matching(container, patterns, owners, listing, result))
    ended_early = []
    started = time.monotonic()
    try:
        if params['await_exit'] and not module.check_mode:
            awaited = await_exit(container, params['await_exit'], params['term_timeout'], params['kill_timeout'])
            result['awaited'] = awaited.report
            ended_early = awaited.killed
            if awaited.failure():
                raise ProcessSourceError(awaited.failure())
        targets = matching(container, patterns, owners, container.list(), result, module)
        result['targets'] = [target_entry(record, container.users) for record in targets]
        if module.check_mode:
            result.update(killed=planned_kills(targets, params['term_timeout']), changed=bool(targets))
            return ended_early, None, started
        if not ended_early:
            started = time.monotonic()
        return ended_early, (termination.run(targets) if targets else None), started
    except (ProcessSourceError, CommandError) as exc:
        result['killed'] = ended_early + termination.killed
        result['changed'] = bool(result['killed'])
        result['elapsed'] = round(time.monotonic() - started, 3) if result['killed'] else 0.0
        fail('%s; %s' % (exc, signalled_summary(result['killed'])))


def survivors_message(module: AnsibleModule, outcome: TerminationOutcome) -> str:
    signalled = {entry['pid'] for entry in outcome.killed}
    return ('%d matching process(es) in container %d still there after SIGKILL and %.1fs: %s. %s; '
            'a process in state D waits on the kernel (often a hung GPU or NFS), check dmesg on the node; '
            'one that was never signalled keeps appearing (a respawn): stop what starts it.'
            % (len(outcome.remaining), module.params['vmid'], module.params['kill_timeout'],
               '; '.join('%s%s' % (record.describe(), '' if record.pid in signalled else ' [never signalled]')
                         for record in outcome.remaining),
               signalled_summary(outcome.killed)))


def stop_matching(module: AnsibleModule, result: dict[str, Any]) -> None:
    patterns = validated_patterns(module.params)
    container = running_container(module, result)
    ended_early, outcome, started = kill(module, container, patterns, result)
    if module.check_mode:
        return
    result['elapsed'] = round(time.monotonic() - started, 3) if outcome or ended_early else 0.0
    result['killed'] = ended_early + (outcome.killed if outcome else [])
    result['changed'] = bool(result['killed'])
    if outcome is not None:
        result['remaining'] = [remaining_entry(record) for record in outcome.remaining]
        if outcome.remaining:
            fail(survivors_message(module, outcome))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = new_result(killed=[], targets=[], spared=[], remaining=[], cmd=[], vmid=module.params['vmid'], awaited=nothing_awaited(),
                        elapsed=0.0)
    run_module(module, result, lambda: stop_matching(module, result))


if __name__ == '__main__':
    main()
