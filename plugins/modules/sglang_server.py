#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_server
short_description: Stop, start and verify an SGLang server, waiting for /health on the host itself
version_added: 0.2.0
description:
  - Runs the server described by a C(launch.json) (V({"python", "module", "args", "environment"})) either as a
    systemd unit or as a detached process in its own session with a pid file and a log file.
  - O(state=stopped) stops it gracefully (SIGTERM to the main process, SGLang drains, SIGKILL to what is left
    after O(term_timeout)); the time the stop began is returned and, with O(stop_marker), written to a file
    the rollback guard reads.
  - With O(wait=false), O(state=stopped) returns as soon as the stop has begun and lists in RV(stopping) the
    processes being stopped; the next step waits for them on the host (the O(gpuops.sglang.gpu_release#module:await_exit)
    and O(gpuops.sglang.pct_exec_kill#module:await_exit) options), so the server's drain overlaps that step's start-up
    instead of adding to the outage.
  - O(state=started) and O(state=restarted) start it (a systemd unit is enabled too, so the server comes back
    after a reboot) and poll C(/health) from the host itself every
    O(health_interval) seconds (one task, not one round trip per attempt) until it answers 200, the server
    dies, or O(health_timeout) passes; then compare C(/server_info) (or C(/get_server_info)) with
    O(expected_server_info).
  - Only the server's own listener at O(url) is asked. While another process holds its port the start waits, and at
    O(health_timeout) fails with C(port P is held by PID N (user U, command ...), not by the started server).
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.server
  - gpuops.sglang.server_api_key
  - gpuops.sglang.guard_lease
  - gpuops.sglang.neighbours
attributes:
  check_mode:
    support: full
    details: Reports whether the server runs and would be stopped or started, and which processes a stop would end
      (RV(would_stop)); changes nothing.
  diff_mode:
    support: none
    details: Not applicable; the module acts on processes.
  platform:
    platforms: posix
options:
  activate:
    description:
      - Files moved into place before the start (O(state=restarted) only, after the stop), each O(activate[].candidate)
        is copied over its O(activate[].live) file atomically, with O(activate[].mode) and the candidate's owner and
        group (the role writes the candidate with C(sglang_group), which a server running as C(sglang_user) reads
        it through).
      - In the outage window this is the move of the new configuration, inside the step that renews the rollback
        guard (O(guard)), rather than one controller round trip per file that cannot renew it.
    type: list
    elements: dict
    default: []
    suboptions:
      candidate:
        description: The file to put in place.
        type: path
        required: true
      live:
        description: Where the server reads it.
        type: path
        required: true
      mode:
        description: Octal mode of the live file afterwards.
        type: str
        default: '0644'
      label:
        description: What the file is, in messages.
        type: str
        default: ''
  state:
    description:
      - V(stopped) stops a running server. V(started) starts it when it does not run (a running, healthy,
        matching server is left alone). V(restarted) stops it when it runs, then starts it.
    type: str
    choices: [started, stopped, restarted]
    default: started
  manager:
    description: How the server runs.
    type: str
    choices: [systemd, detached]
    required: true
  log_file:
    description:
      - Log file of the detached server; the server's output is appended to it.
      - Opened without following a link - a start fails, before anything runs, when it is a symlink, a hard link
        or not a regular file (keep it in a folder only root can write, as the role's preflight requires).
    type: path
    required: true
  term_timeout:
    description: Seconds SGLang may drain after SIGTERM before SIGKILL (detached; systemd uses the unit's TimeoutStopSec).
    type: float
    default: 30
  health_timeout:
    description: Seconds the new server may take to answer C(/health) with 200 (real model loads take minutes).
    type: float
    default: 900
  health_interval:
    description: Seconds between two C(/health) probes.
    type: float
    default: 0.25
  expected_server_info:
    description: Keys and values C(/server_info) must report; a difference fails the task.
    type: dict
    default: {}
  expected_environment:
    description: Environment variables the server must report under C(environment) in C(/server_info).
    type: dict
    default: {}
  daemon_reload:
    description: Run C(systemctl daemon-reload) before starting (the unit file changed).
    type: bool
    default: false
  stop_marker:
    description: File that receives the time (seconds since the epoch) the stop began.
    type: path
  wait:
    description:
      - With O(state=stopped), whether to wait until the server has exited. V(false) sends SIGTERM (systemd
        queues the stop job, C(systemctl stop --no-block)) and returns. The drain bound stays the same;
        whoever waits on RV(stopping) (the C(await_exit) of M(gpuops.sglang.gpu_release) or
        M(gpuops.sglang.pct_exec_kill)) sends SIGKILL to what is left after its O(term_timeout), and systemd
        does after C(TimeoutStopSec). Give that step the same term_timeout.
      - Ignored by the other states, which always wait.
    type: bool
    default: true
  kill_patterns:
    description:
      - With O(state=stopped), regular expressions (Python C(re), searched in the full command line) for the
        processes that belong to SGLang on this host. Those that match and are not the server's own (its
        session, or its unit's control group) are returned in RV(strays); they are never signalled here.
      - Read right before the SIGTERM (after O(drain_timeout)), from the same reading that names the
        server's own processes (RV(stopping)), so that the step that would end them (for a container,
        M(gpuops.sglang.pct_exec_kill)) runs inside the outage only when there are any. The server's own
        processes are the next step's C(await_exit).
      - Where a unit's control group cannot be read, only its main PID counts as the server's own, and its
        children are then listed too (the kill step runs rather than being skipped on a guess).
      - Empty (the default) reads nothing.
    type: list
    elements: str
    default: []
  release:
    description:
      - With O(state=stopped) or O(state=restarted), release the GPUs in this module's run, as
        M(gpuops.sglang.gpu_release) would, with these of its options (every one but
        O(gpuops.sglang.gpu_release#module:guard), which is O(guard)); its result is RV(release). Its
        O(gpuops.sglang.gpu_release#module:await_exit) also awaits RV(stopping).
      - With O(state=stopped), right after the stop, and only when the stop found no strays (O(kill_patterns));
        otherwise the step that ends them must come first, so nothing is released here and RV(release) is null.
      - With O(state=restarted), after the stop (when the server ran) and before the files of O(activate) move
        and the server starts; the role's start uses it so that the GPU release, whose holders the earlier stop
        (O(wait=false)) left draining, and the start share one module run inside the outage.
      - Null (the default) releases nothing.
    type: dict
  drain_timeout:
    description:
      - Before the stop, wait up to this many seconds until the server holds no request in flight, read from
        the server itself (C(/v1/loads), or C(/get_load) on older releases; two zero readings in a row).
      - Meant for a server just taken out of its router (M(gpuops.sglang.sglang_router_worker)), whose
        requests already routed to it must finish. When the time passes the server is stopped anyway and
        RV(drain) says so (SGLang's own SIGTERM drain then still has O(term_timeout)).
      - A server with neither endpoint cannot show its drain, so it is stopped at once, with a warning and
        RV(drain) saying why, rather than after the whole wait.
      - V(0) does not wait.
    type: float
    default: 0
  ready_checks:
    description:
      - After C(/health) answered 200, how many C(/health_generate) answers in a row must be 200 (a real
        one-token generation on an idle SGLang server; C(/health) where the server has none).
      - The start, C(/health), these checks and O(generate_probe) share one O(health_timeout); the whole
        wait is bounded by it, so the rollback guard's deadline covers it.
    type: int
    default: 0
  generate_probe:
    description: After the checks, send one real generation request (C(POST /generate), one new token) and require a generated text.
    type: bool
    default: false
notes:
  - The server's SIGTERM drain has no upper bound in SGLang itself; O(term_timeout) is that bound.
  - A start whose controller is gone (its stdout, the pipe or socket Ansible reads the result from, lost its reader)
    starts nothing; with O(state=restarted) the server stays stopped (after the O(release), which only awaits, ends
    and proves). The task fails saying so, and an armed guard restores the previous server at its idle bound.
seealso:
  - module: gpuops.sglang.sglang_guard
'''

EXAMPLES = r'''
- name: Start the server and wait until it is healthy and reports the wanted flags
  gpuops.sglang.sglang_server:
    state: started
    manager: systemd
    service_name: sglang
    launch_file: /etc/sglang/launch.json
    pidfile: /run/sglang/sglang.pid
    log_file: /var/log/sglang/server.log
    url: http://127.0.0.1:30000
    expected_server_info:
      speculative_algorithm: EAGLE3
      max_running_requests: 64

- name: Stop the detached server gracefully
  gpuops.sglang.sglang_server:
    state: stopped
    manager: detached
    launch_file: /etc/sglang/launch.json
    pidfile: /run/sglang/sglang.pid
    log_file: /var/log/sglang/server.log
    url: http://127.0.0.1:30000
    term_timeout: 30
'''

RETURN = r'''
activated:
  description: The live files O(activate) wrote (empty in check mode and for another O(state)).
  returned: always
  type: list
  elements: str
running:
  description: Whether the server runs at the end (in check mode, now).
  returned: always
  type: bool
pid:
  description: Main PID of the server at the end (null when none runs).
  returned: always
  type: int
healthy:
  description: Whether C(/health) answered 200 at the end, from a socket the server's own processes hold.
  returned: always
  type: bool
health_attempts:
  description: C(/health) probes made while waiting.
  returned: always
  type: int
stopped_at:
  description: When the stop began (seconds since the epoch, host clock); null when nothing was stopped.
  returned: always
  type: float
stop_elapsed:
  description: Seconds the stop took (null when nothing was stopped); with O(wait=false), until it had begun.
  returned: always
  type: float
release:
  description:
    - With O(release), what the release returned, with the keys M(gpuops.sglang.gpu_release) returns; on a failed
      release, as far as it got.
    - Null when O(release) is null, or a stop found strays.
  returned: always
  type: dict
stopping:
  description:
    - PIDs of the server's processes that were told to stop and may still be draining (O(wait=false)); the
      detached server's session, or the systemd unit's control group (its main PID where the group cannot be
      read). Empty when the module waited or nothing was stopped. Hand them to the next step's C(await_exit).
  returned: always
  type: list
  elements: int
  sample: [4711, 4712, 4713]
strays:
  description:
    - Processes matching O(kill_patterns) that are not the server's own, as seen right before the SIGTERM (in
      check mode, now; every match when no server runs); this module and its ancestors are never listed. Empty
      when O(kill_patterns) is empty.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Its PID.
      type: int
    cmdline:
      description: Its full command line.
      type: str
  sample: [{pid: 4802, cmdline: "sglang::scheduler_TP0"}]
spared:
  description:
    - Processes matching O(kill_patterns) that are not this server's own and belong to another server of the machine
      (its marks, or nothing that tells whose while O(neighbours) are given); never signalled, by this module or by the
      container kill. C(why) says what was read.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Its PID.
      type: int
    cmdline:
      description: Its full command line.
      type: str
    why:
      description: What it carries that is another server's, or why nobody can tell whose it is.
      type: str
  sample:
    - pid: 4903
      cmdline: python3 -m sglang.launch_server --port 30001
      why: "it carries the marks of another server than this one (service sglang, port 30000): its command line serves --port 30001"
would_stop:
  description:
    - In check mode with O(state=stopped) or O(state=restarted), the processes the stop would end, read now and
      changing nothing - the unit's control group (its main PID where the group cannot be read) or the detached
      server's session. Empty outside check mode and when no server runs.
    - RV(would_stop[].user) is the effective user, from C(/proc/PID/status) (a command line is the process's own
      choice); RV(would_stop[].gpus) is always empty here (M(gpuops.sglang.gpu_release) names the GPU holders).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Its PID.
      type: int
    user:
      description: The name of its effective user (its uid where the host has no account for it); null when unreadable.
      type: str
    cmdline:
      description: Its full command line.
      type: str
    gpus:
      description: Always empty (see above).
      type: list
      elements: int
  sample: [{pid: 4711, user: root, cmdline: "/opt/sglang/bin/python -m sglang.launch_server --port 30000", gpus: []}]
drain:
  description:
    - The wait for requests in flight before the stop (O(drain_timeout)); null when there was none.
    - C(idle) false means the server was stopped with requests still in flight (C(why) says how many).
  returned: always
  type: dict
  sample: {idle: true, in_flight_at_start: 3, in_flight_at_end: 0, waited_s: 0.61, source: /v1/loads, why: null}
readiness:
  description: The checks after C(/health) (O(ready_checks), O(generate_probe)); null when none ran.
  returned: always
  type: dict
  sample: {ready: true, path: /health_generate, attempts: 3, generate: {ok: true, status: 200, elapsed: 0.21}}
started_at:
  description: When the start began (host clock); null when nothing was started.
  returned: always
  type: float
healthy_at:
  description: When C(/health) first answered 200 after the start (host clock); null otherwise.
  returned: always
  type: float
mismatches:
  description: What C(/server_info) reports differently from O(expected_server_info) and O(expected_environment).
  returned: always
  type: list
  elements: str
server_info:
  description: The reported values of the keys in O(expected_server_info).
  returned: always
  type: dict
cmd:
  description: The commands run, as argv lists.
  returned: always
  type: list
  elements: list
'''

import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.base._controller import GONE_MESSAGE, controller_gone
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import mode_and_owner, read_bytes, write_atomic
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, run_module
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import NEIGHBOURS_OPTION, ServerMarks, compile_patterns
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import (
    COMMAND_TIMEOUT, SERVER_OPTIONS, Server, ServerError,
)

# The release option's own: what an earlier step left stopping (gpu_release's await_exit).
AWAIT_SPEC = dict(await_exit=dict(type='list', elements='int', default=[]))

ARGUMENT_SPEC = dict(
    SERVER_OPTIONS,
    state=dict(type='str', default='started', choices=['started', 'stopped', 'restarted']),
    manager=dict(type='str', required=True, choices=['systemd', 'detached']),
    log_file=dict(type='path', required=True),
    term_timeout=dict(type='float', default=30),
    health_timeout=dict(type='float', default=900),
    health_interval=dict(type='float', default=0.25),
    expected_server_info=dict(type='dict', default={}),
    expected_environment=dict(type='dict', default={}),
    daemon_reload=dict(type='bool', default=False),
    stop_marker=dict(type='path'),
    wait=dict(type='bool', default=True),
    # One name with pct_exec_kill and sglang_guard for SGLang's command lines.
    kill_patterns=dict(type='list', elements='str', default=[]),
    neighbours=NEIGHBOURS_OPTION,
    drain_timeout=dict(type='float', default=0),
    ready_checks=dict(type='int', default=0),
    generate_probe=dict(type='bool', default=False),
    # gpu_release's options, validated against its spec (release_options): one spec, not a copy here.
    release=dict(type='dict'),
    guard=GUARD_OPTION,
    activate=dict(type='list', elements='dict', default=[], options=dict(
        candidate=dict(type='path', required=True),
        live=dict(type='path', required=True),
        mode=dict(type='str', default='0644'),
        label=dict(type='str', default=''),
    )),
)
ERRORS = (ServerError, CommandError, LeaseError, OSError, ValueError, KeyError)


def stray_entries(records: list[Any]) -> list[Any]:
    return [dict(pid=record.pid, cmdline=record.cmdline) for record in records]


def report_only(module: AnsibleModule, server: Server, pid: int | None, patterns: list[re.Pattern],
                result: dict[str, Any]) -> None:
    """Check mode, read-only: what runs, whether it is healthy and whether it reports the wanted settings."""
    params = module.params
    state = params['state']
    result['strays'] = stray_entries(server.strays(patterns, pid))
    result['spared'] = server.spared
    if state in ('stopped', 'restarted') and pid is not None:
        result['would_stop'] = server.described_own(pid)
    result['healthy'] = pid is not None and server.health() == 200
    if server.foreign_listener_named():
        module.warn(server.foreign_listener)
    if result['healthy'] and server.serves_http and (params['expected_server_info'] or params['expected_environment']):
        result['server_info'], result['mismatches'] = server.settings_or_why(params['expected_server_info'],
                                                                             params['expected_environment'])
    result['changed'] = (state == 'stopped' and pid is not None) or (state == 'started' and pid is None) \
        or state == 'restarted' or bool(result['mismatches'])


def release_options(module: AnsibleModule) -> dict[str, Any] | None:
    """The release option checked against gpu_release's own spec, with its defaults; None when not set."""
    params = module.params
    if params['release'] is None:
        return None
    # Imported only by a run that releases (AnsiballZ still ships it): the start, inside the outage, does not compile
    # the release and its NVIDIA reader on the host (about 50 ms a run on the lab).
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import RELEASE_SPEC, GpuRelease, ReleaseFailed, Timeline
    if params['state'] == 'started':
        fail('release is for state=stopped or state=restarted (got state=started)')
    validated = ArgumentSpecValidator(RELEASE_SPEC | AWAIT_SPEC).validate(params['release'])
    if validated.error_messages:
        fail('release: %s; nothing was stopped' % '; '.join(validated.error_messages))
    try:
        GpuRelease(None, validated.validated_parameters, module.check_mode, Timeline()).excludes()
    except ReleaseFailed as exc:
        fail('release: %s; nothing was stopped' % exc)
    return validated.validated_parameters


def release_gpus(module: AnsibleModule, options: dict[str, Any], result: dict[str, Any]) -> None:
    """The GPU release in this run (RV(release)), awaiting the stopping server (RV(stopping) and await_exit)."""
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import GpuRelease, ReleaseFailed, Timeline, empty_result
    guard = None if module.check_mode or not module.params['guard'] else dict(module.params['guard'], after=0)
    released = result['release'] = new_result(**empty_result())
    awaited = sorted(set(options['await_exit']) | set(result['stopping']))
    try:
        GpuRelease(module, options, module.check_mode, Timeline()).run(
            released, awaited, Renewer.from_option(guard, 'sglang_server %s (gpu release)' % module.params['state']))
    except ReleaseFailed as exc:
        fail('the GPUs of %s were not released: %s; the server was not started' % (module.params['service_name'], exc))
    finally:
        result['changed'] = result['changed'] or released['changed']


def stop_bound(params: dict[str, Any], waits: bool) -> float:
    """Seconds the stop may take: the drain, the command, and SIGTERM's wait then SIGKILL's when it waits."""
    return params['drain_timeout'] + COMMAND_TIMEOUT + (2 * params['term_timeout'] if waits else 0)


def stop(module: AnsibleModule, server: Server, pid: int, patterns: list[Any], result: dict[str, Any],
         lease: Renewer) -> None:
    """Drain (drain_timeout), then stop the running server; its stop marker written."""
    params = module.params
    lease.renew(stop_bound(params, params['wait'] or params['state'] != 'stopped'))
    if params['drain_timeout'] > 0 and server.serves_http:
        result['drain'] = server.wait_idle(params['drain_timeout'], params['health_interval'])
        if not result['drain']['idle']:
            module.warn('stopping %s with requests possibly in flight: %s'
                        % (params['service_name'], result['drain']['why']))
    stopped = server.stop(wait=params['wait'] or params['state'] != 'stopped', stray_patterns=patterns)
    result['strays'] = stray_entries(stopped['strays'])
    result['spared'] = stopped['spared']
    result['stopped_at'] = stopped['stopped_at']
    result['stop_elapsed'] = stopped.get('stop_elapsed')
    result['stopping'] = stopped['stopping']
    result['changed'] = stopped['changed']
    if params['stop_marker'] and stopped['stopped_at']:
        with open(params['stop_marker'], 'w') as handle:
            handle.write('%.3f\n' % stopped['stopped_at'])
    result.update(running=False, pid=None)


def activate(entries: list[Any], result: dict[str, Any]) -> None:
    """Each candidate over its live file (atomic, with the candidate's owner and group: the role wrote it with the
    server's group); the live paths written."""
    for entry in entries:
        try:
            data = read_bytes(entry['candidate'])
            owner = mode_and_owner(entry['candidate'])[1]
            write_atomic(entry['live'], data, int(entry['mode'], 8), '.gpuops-activate', owner)
        except (OSError, ValueError) as exc:
            fail('cannot put the %s in place (%s -> %s): %s; the server was not started'
                 % (entry['label'] or 'file', entry['candidate'], entry['live'], to_native(exc)))
        result['activated'].append(entry['live'])


def bring_up(module: AnsibleModule, server: Server, pid: int | None, result: dict[str, Any], lease: Renewer) -> None:
    """Start the server (or wait for the one that runs) until /health answers 200."""
    params = module.params
    # The start command; the health wait renews on every poll (server.progress).
    lease.renew(COMMAND_TIMEOUT)
    if params['state'] == 'started' and pid is not None:
        # Running already (perhaps still loading): wait for it rather than start a second one.
        health = server.wait_healthy(params['health_timeout'], params['health_interval'])
        result.update(healthy=health['healthy'], health_attempts=health['attempts'])
        if not health['healthy']:
            fail('the running server %s is not healthy: %s' % (params['service_name'], health['why']))
        return
    started, died = server.start(daemon_reload=params['daemon_reload'])
    result.update(changed=True, started_at=started['started_at'], running=True, pid=started['pid'])
    health = server.wait_healthy(params['health_timeout'], params['health_interval'], died=died)
    result.update(healthy=health['healthy'], healthy_at=health['healthy_at'],
                  health_attempts=health['attempts'], pid=server.main_pid())
    if not health['healthy']:
        fail('the server %s did not become healthy: %s' % (params['service_name'], health['why']),
             running=result['pid'] is not None)


def verify_ready(module: AnsibleModule, server: Server, begun: float, result: dict[str, Any], lease: Renewer) -> None:
    """ready_checks and generate_probe, within what is left of health_timeout."""
    params = module.params

    # Only what is left of health_timeout: the window's budget (and the guard's deadline) counts on it.
    def left() -> float:
        return max(params['health_timeout'] - (time.time() - begun), 0.1)
    readiness = server.wait_ready(params['ready_checks'], left(), params['health_interval']) \
        if params['ready_checks'] else {'ready': True, 'path': None, 'attempts': 0, 'why': None}
    if readiness['ready'] and params['generate_probe']:
        lease.renew(left())
        readiness['generate'] = server.generate_once(left())
        readiness['ready'] = readiness['generate']['ok']
        readiness['why'] = readiness['generate']['why']
    result['readiness'] = readiness
    if not readiness['ready']:
        fail('the server %s is healthy but not ready: %s' % (params['service_name'], readiness['why']))


def manage(module: AnsibleModule, server: Server, result: dict[str, Any], lease: Renewer) -> None:
    params = module.params
    state = params['state']
    if params['health_interval'] <= 0 or min(params['health_timeout'], params['term_timeout'],
                                             params['drain_timeout'], params['ready_checks']) < 0:
        fail('health_interval must be above 0; health_timeout, term_timeout, drain_timeout and '
             'ready_checks not negative')
    pid = server.main_pid()
    if server.pidfile_ignored:
        module.warn(server.pidfile_ignored)
    result.update(running=pid is not None, pid=pid)
    # Compiled and checked first: a bad pattern or release option fails the task before anything is stopped.
    patterns = compile_patterns(params['kill_patterns'], 'stray pattern') if state == 'stopped' else []
    release = release_options(module)
    if module.check_mode:
        report_only(module, server, pid, patterns, result)
        if release is not None and not result['strays']:
            release_gpus(module, release, result)
        return
    if state in ('stopped', 'restarted') and pid is not None:
        stop(module, server, pid, patterns, result, lease)
    elif patterns:
        # Nothing of the server runs: every match is a stray.
        result['strays'] = stray_entries(server.strays(patterns, None))
        result['spared'] = server.spared
    if state == 'stopped':
        # `after` is the container kill's, which follows only when the stop found strays.
        lease.done(handed_over=bool(result['strays']))
        if release is not None and not result['strays']:
            release_gpus(module, release, result)
        return
    if state == 'restarted' and release is not None:
        # The holders the earlier stop (wait=false) left draining, awaited here: one module run with the start.
        release_gpus(module, release, result)
    if (state == 'restarted' or pid is None) and controller_gone():
        # The role's start is in flight on the host while the old server drains (the release awaits it): a controller
        # cut off meanwhile must not find a new server started behind its back, holding the guard past its idle bound.
        fail('%s: the server %s was not started%s; the rollback guard (when armed) restores the previous server once '
             'its idle bound passes; run the redeploy again to go on' % (
                 GONE_MESSAGE, params['service_name'], ' (it is stopped)' if state == 'restarted' else ''),
             running=False)
    if state == 'restarted':
        # Renewed before any file moves: a guard whose lease lapsed restores the previous files, and a renewal is
        # refused once a restore holds the guard, so this run never moves its files over the restored ones.
        lease.renew(COMMAND_TIMEOUT)
        activate(params['activate'], result)
    # health_timeout bounds everything from here: the start, /health, the ready checks, the probe.
    begun = time.time()
    bring_up(module, server, pid, result, lease)
    # A rank > 0 of a multi-node server has no HTTP to verify: the role verifies the group on rank 0.
    if server.serves_http and (params['expected_server_info'] or params['expected_environment']):
        result['server_info'], result['mismatches'] = server.compare_settings(params['expected_server_info'],
                                                                              params['expected_environment'])
        if result['mismatches']:
            fail('the server %s reports other settings than wanted: %s'
                 % (params['service_name'], '; '.join(result['mismatches'])))
    if server.serves_http and (params['ready_checks'] or params['generate_probe']):
        verify_ready(module, server, begun, result, lease)
    lease.done()


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    result = new_result(activated=[], running=False, pid=None, healthy=False, health_attempts=0, stopped_at=None,
                        stop_elapsed=None, stopping=[], strays=[], spared=[], would_stop=[], drain=None, readiness=None, release=None,
                        started_at=None, healthy_at=None, mismatches=[], server_info={}, cmd=[])
    # One deadline per command: a wedged systemd or a hung tool must not hang the task.
    server = Server(params['manager'], params['service_name'], params['launch_file'], params['pidfile'],
                    params['log_file'], params['url'], params['term_timeout'],
                    runner=CommandRunner(module, COMMAND_TIMEOUT).as_runner(), user=params['user'], group=params['group'])
    lease = Renewer.from_option(None if module.check_mode else params['guard'], 'sglang_server %s' % params['state'])
    server.progress = lease.tick
    server.neighbours = [ServerMarks.from_option(neighbour) for neighbour in params['neighbours']]

    def finish(result: dict[str, Any]) -> None:
        result['cmd'] = server.commands
    run_module(module, result, lambda: manage(module, server, result, lease), errors=ERRORS, finish=finish,
               describe=lambda exc: 'sglang_server %s of %s failed: %s'
               % (params['state'], params['service_name'], to_native(exc)))


if __name__ == '__main__':
    main()
