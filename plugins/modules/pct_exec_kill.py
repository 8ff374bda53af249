#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: pct_exec_kill
short_description: Stop the SGLang processes inside a Proxmox VE LXC container
version_added: 0.1.0
description:
  - Runs on a Proxmox VE node. Lists the processes of container O(vmid) with C(pct exec VMID -- ps),
    selects those whose full command line matches O(patterns), and stops them with SIGTERM, a wait of
    O(term_timeout) seconds, then SIGKILL for the survivors.
  - Verifies that every selected process is gone and fails, listing each survivor with its state,
    when one is not.
  - Every command is an argument list (C(pct exec VMID -- kill -s TERM PID ...)); no shell string is
    assembled, so nothing is re-quoted through ssh, pct and C(bash -c).
  - Replaces the manual C(ps aux | grep python3 | xargs kill -9), which also killed unrelated Python
    processes and listed some PIDs twice.
author:
  - gpuops.sglang maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Lists what would be killed (same RV(killed) list) and signals nothing.
  diff_mode:
    support: none
    description: Not applicable; the module acts on processes, not on files.
options:
  vmid:
    description: ID of the LXC container whose processes are stopped.
    type: int
    required: true
  patterns:
    description:
      - Python regular expressions searched in each process's full command line (not the 15-character
        C(comm), which cuts C(sglang::scheduler) to C(sglang::schedul)).
      - The default matches what upstream SGLang's own cleanup matches; the launcher, the
        C(sglang::) children, C(sglang.srt), C(sglang.bench) and C(sglang.data_parallel).
    type: list
    elements: str
    default: ['sglang::', 'sglang\.launch_server', 'sglang\.bench', 'sglang\.data_parallel', 'sglang\.srt']
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
  pct:
    description: Path of the pct binary. Found on E(PATH) when not given.
    type: path
notes:
  - Processes are identified by PID and command line, so a PID reused by a new process between
    listing and signalling is never signalled.
seealso:
  - module: gpuops.sglang.gpu_release
'''

EXAMPLES = r'''
- name: Stop SGLang inside container 101
  gpuops.sglang.pct_exec_kill:
    vmid: 101

- name: Stop only the server on port 30000, giving it a minute to drain
  gpuops.sglang.pct_exec_kill:
    vmid: "{{ pve_vmid }}"
    patterns:
      - 'sglang\.launch_server .*--port 30000'
      - 'sglang::'
    term_timeout: 60
  delegate_to: "{{ pve_node }}"
'''

RETURN = r'''
killed:
  description: Processes that matched and were signalled (in check mode, would be), with the last signal sent.
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
remaining:
  description: Matching processes still alive at the end; the module fails when this is not empty.
  returned: always
  type: list
  elements: dict
  sample: []
cmd:
  description: The argv lists run through pct, in order.
  returned: always
  type: list
  elements: list
vmid:
  description: The container acted on.
  returned: always
  type: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils._pct import (
    ContainerProcesses,
    PctCommand,
    parse_status,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import (
    DEFAULT_SGLANG_PATTERNS,
    ProcessSourceError,
    compile_patterns,
    planned_kills,
    select,
    terminate,
)


def remaining_entry(record):
    return {'pid': record.pid, 'cmdline': record.cmdline, 'state': record.state}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vmid=dict(type='int', required=True),
            patterns=dict(type='list', elements='str', default=DEFAULT_SGLANG_PATTERNS),
            term_timeout=dict(type='float', default=10.0),
            kill_timeout=dict(type='float', default=10.0),
            pct=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, killed=[], remaining=[], cmd=[], vmid=params['vmid'])

    try:
        patterns = compile_patterns(params['patterns'])
    except ValueError as exc:
        module.fail_json(msg=str(exc), **result)
    if params['term_timeout'] < 0 or params['kill_timeout'] < 0:
        module.fail_json(msg='term_timeout and kill_timeout must not be negative', **result)

    pct_path = params['pct'] or module.get_bin_path('pct', required=False)
    if not pct_path:
        module.fail_json(msg='pct was not found on PATH; is this a Proxmox VE node? '
                             'Set the pct option to its path.', **result)
    pct = PctCommand(pct_path, params['vmid'])
    container = ContainerProcesses(module.run_command, pct)
    result['cmd'] = container.commands

    rc, out, err = container.run(pct.status())
    status = parse_status(out) if rc == 0 else None
    if status != 'running':
        detail = (err or out).strip() or 'no output'
        state = ('is %s' % status) if status else 'does not exist or cannot be queried (rc %d: %s)' % (rc, detail)
        module.fail_json(msg='container %d %s; nothing was killed' % (params['vmid'], state), **result)

    try:
        targets = select(container.list(), patterns)
        if module.check_mode:
            result['killed'] = planned_kills(targets, params['term_timeout'])
            result['changed'] = bool(targets)
            module.exit_json(**result)
        outcome = terminate(container, targets, params['term_timeout'], params['kill_timeout'])
    except ProcessSourceError as exc:
        module.fail_json(msg=str(exc), **result)

    result['killed'] = outcome.killed
    result['remaining'] = [remaining_entry(record) for record in outcome.remaining]
    result['changed'] = bool(outcome.killed)
    if outcome.remaining:
        module.fail_json(
            msg='%d process(es) in container %d survived SIGKILL after %.1fs: %s. A process in state D '
                'waits on the kernel (often a hung GPU or NFS); check dmesg on the node.'
                % (len(outcome.remaining), params['vmid'], params['kill_timeout'],
                   '; '.join(record.describe() for record in outcome.remaining)),
            **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
