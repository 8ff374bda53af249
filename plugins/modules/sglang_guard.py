#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_guard
short_description: Arm, confirm or carry out a host-side rollback guard around an SGLang redeploy
version_added: 0.2.0
description:
  - A "commit confirmed" for the outage window. O(state=armed), before anything is stopped, keeps the exact
    bytes of O(files) (the sglang files the patch touches, the launch configuration, the unit) and how to run
    the previous server, and starts a watcher on the host that does not depend on the controller or the ssh
    connection (a transient systemd service where systemd runs, a detached process in its own session
    elsewhere).
  - The guard is a lease. With O(idle) set, the run's steps renew it on the host (the modules' C(guard) option,
    see M(gpuops.sglang.sglang_server)); the watcher acts when nothing renewed it for O(idle) seconds past what
    the last step said it would take, or at O(deadline), whichever comes first.
  - Unless O(state=confirmed) is run with the same O(run_id) before then, the watcher stops
    whatever server runs, stops what is left of SGLang, writes back every file byte for byte, starts the
    previous server, waits for C(/health) from a socket the server's own processes hold (never from another process
    that took its port), and writes its report to C(fired.json) in O(folder), with the bound
    that fired (RV(fired.bound)).
  - O(state=restored) does the same at once (the controller's rollback, or a new run taking over a guard an
    earlier run left armed). Only one actor holds the guard at a time (a lock), so there is never a second
    start or a half-restored tree; a restore cut short is finished by the next one.
  - O(state=query) only reports, RV(lease) included (armed since, last renewal, idle bound, expiry, deadline).
  - Every bound is measured on the host's boot clock (C(CLOCK_BOOTTIME), C(CLOCK_MONOTONIC) where it does not
    exist), which NTP or C(date -s) never steps, in the boot the guard was armed in; wall-clock times are for
    display. A guard armed before a reboot of the host is due at once. A guard armed by an earlier release (its
    state has no boot-clock readings) is read on the wall clock, as that release reads it.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.neighbours
attributes:
  check_mode:
    support: full
    details: Reports whether a guard is armed and what would be done; changes nothing.
  diff_mode:
    support: none
    details: Not applicable; the guard keeps byte copies of files and reports them, it shows no diff.
  platform:
    platforms: posix
options:
  state:
    description: What to do with the guard.
    type: str
    choices: [armed, confirmed, restored, query]
    default: query
  folder:
    description:
      - The guard's folder on the host (one per server); holds the backups, the lock and the reports.
      - The guard runs as root and acts on what it keeps there, so every state refuses a folder that another user
        could have written. The folder and every folder above it, up to C(/), must belong to the user the module
        runs as (or root) and be writable by neither group nor others. A sticky, world-writable folder such as
        C(/tmp) on the way is refused too. The watcher checks again on every poll and acts on nothing once it fails.
      - Made C(0700) (an existing one is tightened to it); everything in it is C(0600). So it must be a folder of the
        guard's own (the role uses C(sglang_guard_dir/SERVICE)); every state refuses a system folder (C(/), C(/var/lib),
        C(/etc), C(/tmp)...) or one under C(/proc), C(/sys) or C(/dev).
    type: path
    required: true
  run_id:
    description: Identifies the run that arms and confirms. Required for O(state=armed) and O(state=confirmed).
    type: str
  deadline:
    description:
      - Seconds after arming at which the guard restores unless confirmed (on the host's boot clock).
      - Above 0 and at most 172800 (two days, the role's C(sglang_rollback_deadline) maximum); anything else, NaN
        included, is refused before anything is kept.
    type: float
    default: 1800
  idle:
    description:
      - Seconds without a renewal after which the watcher restores (O(state=armed)); the arm counts as the first
        renewal. Unset or V(0), only O(deadline) counts (a guard without a lease). At most 3600 (the role's
        C(sglang_rollback_idle) maximum).
      - Must exceed what can pass between two renewals on the controller (ssh connect and retries, building the
        next module, a loaded controller); the role's C(sglang_rollback_idle) says how it was chosen.
    type: float
  after:
    description:
      - Seconds the step after the arm may take without renewing (O(state=armed)); taking the server out of its
        router runs there. From 0 to 172800, as O(deadline).
    type: float
    default: 0
  trigger:
    description:
      - Who asks for O(state=restored), as the report's RV(fired.acted_by) and RV(fired.bound) say it.
        Default V(controller) with O(run_id), V(takeover) without. V(on_demand) is the operator's
        rollback (C(playbooks/rollback.yml)).
    type: str
    choices: [controller, takeover, on_demand]
  files:
    description: Files whose pre-run bytes are kept (a file that did not exist is removed on restore).
    type: list
    elements: path
    default: []
  server:
    description:
      - How to stop and start the server, as the M(gpuops.sglang.sglang_server) options of the same names (one
        spec, module_utils/domain/_server.py C(SERVER_OPTIONS)); needed to arm.
      - V(url="") is a rank above 0 of a server spanning several hosts, which serves no HTTP; its restore
        counts it as started once its process has stayed up for a second.
      - V(service_name) must be a plain name (letters, digits, C(_ . @ -), not C(.) or C(..)), since the watcher's unit
        is named after it, and the role's guard folder too.
    type: dict
    suboptions:
      manager:
        description: How the server runs.
        type: str
        choices: [systemd, detached]
        required: true
      service_name:
        description: Name of the systemd unit (without C(.service)); also names the detached server in messages.
        type: str
        default: sglang
      launch_file:
        description: The live C(launch.json) the detached server is started from.
        type: path
        required: true
      pidfile:
        description: Pid file of the detached server (its session leader).
        type: path
        required: true
      log_file:
        description: Log file of the detached server.
        type: path
        required: true
      url:
        description: Base URL the server answers at; V("") for a rank above 0 of a server group.
        type: str
        required: true
      term_timeout:
        description: Seconds SGLang may drain after SIGTERM before SIGKILL.
        type: float
        default: 30
      user:
        description:
          - The user the server runs as (the role's C(sglang_user)); unset, the user the module runs as. A restore
            starts a detached server as this user, and stops only this user's leftovers (O(kill_patterns)).
          - A user that does not exist on the host is refused, and nothing is armed.
        type: str
      group:
        description: The server's group (the role's C(sglang_group)); unset, the primary group of O(server.user).
        type: str
  host:
    description: Name of the host in reports (the inventory name).
    type: str
    default: ''
  kill_patterns:
    description:
      - Regular expressions of command lines stopped after the server (what SGLang leaves behind), searched in the
        command line (its arguments joined by spaces). Anchor them to SGLang's own command lines (the role's
        C(sglang_kill_patterns)), so that an editor or a C(tail) whose arguments merely name SGLang never matches.
      - Only processes of the user the server runs as (O(server.user), else the user that armed the guard) are
        stopped; each one is
        listed in RV(fired.killed).
    type: list
    elements: str
    default: []
  window_folder:
    description:
      - The folder the servers of this machine share (the role's C(sglang_guard_dir), above each server's O(folder)),
        where C(window.json) names the guard whose outage window is open. With it, O(state=armed) opens the machine's
        window, waiting up to O(lock_timeout) while another server's is open (then fails naming it, having done
        nothing), and the confirmation or the restore closes it - one window at a time per machine.
      - Held to the same trust rules as O(folder). Unset, no window is taken.
    type: path
  health_timeout:
    description: Seconds the previous server may take to answer C(/health) after a restore.
    type: float
    default: 900
  max_used_mib:
    description:
      - A GPU counts as free at this many MiB used (after a restore, before the previous server starts), as
        M(gpuops.sglang.gpu_release)'s option of the same name.
    type: int
    default: 0
  memory_timeout:
    description: Seconds to wait for the GPU memory to drain during a restore (M(gpuops.sglang.gpu_release)'s too).
    type: float
    default: 60
  gpus:
    description:
      - The GPUs the server owns (nvidia-smi indices or UUIDs), as M(gpuops.sglang.gpu_release)'s option of the same
        name; the restore's wait for free memory covers only these, so that a neighbour's GPU on the same machine
        never holds it up. Empty, every GPU.
    type: list
    elements: str
    default: []
  stop_marker:
    description: File in which the stop writes its start time, to measure the downtime in the guard's report.
    type: path
  router:
    description:
      - The SGLang router this run took the server out of (O(state=armed)). After a restore whose previous
        server answers C(/health) on its own listener, the guard puts it back into that router, whoever restored (the controller,
        a later run, or the watcher at the deadline).
      - With the previous server's own API key, read from its restored launch configuration (the C(--config)
        file's C(api-key)), so that the router reaches a server with a key; the key is not kept in the state.
    type: dict
    suboptions:
      url:
        description: The router's base URL.
        type: str
        required: true
      worker_url:
        description: The server's URL as the router knows it.
        type: str
        required: true
      api_key:
        description: The router's API key (kept in the guard's state file, readable by root only).
        type: str
      timeout:
        description: Seconds the router may take to list the server as healthy.
        type: float
        default: 30
      drain_timeout:
        description:
          - Seconds a restore waits, once the server is out of the router, for the requests the router had sent it
            to finish before it stops the server (a canary readmitted for its bake serves live traffic).
        type: float
        default: 0
  reason:
    description: Why a restore is done now (O(state=restored)); lands in the report.
    type: str
    default: restore requested
  lock_timeout:
    description:
    - Seconds to wait for the guard's lock (another actor may be restoring), and with O(window_folder) for the
      machine's window (another server's window may be open).
    type: float
    default: 60
  revisions:
    description:
      - With O(state=confirmed), record what the run changed as a revision of the server in O(folder)C(/revisions)
        (docs/undo.md), under the guard's lock, from the pre-run bytes the guard kept and the live files, before they
        are dropped. The first recording also records the state it found as revision 1.
      - A recording that fails (or would not fit the disk) never fails the confirmation nor undoes it; it warns, and
        RV(revision.problem) says why. Unset, no revision is recorded.
    type: dict
    suboptions:
      kept:
        description: How many revisions are kept (the last ones); older ones are pruned. V(0) records none.
        type: int
        default: 5
      margin_mib:
        description: MiB of free space the revision must leave on its file system, or it is not recorded.
        type: int
        default: 256
      meta:
        description: What the revision index says of the run besides its run id and time.
        type: dict
        default: {}
        suboptions:
          sglang_version:
            description: The sglang version the run left installed.
            type: str
          found_sglang_version:
            description: The sglang version read before the window (revision 1's, when this run records it).
            type: str
          patch_sha256:
            description: The SHA-256 of the patch the run applied (or found applied).
            type: str
          report:
            description: The run's summary (the role gives its reasons, the configuration files changed, whether it patched).
            type: dict
          undo_to:
            description:
              - Set by an undo run, the revision it put back; the revision is then recorded with origin V(undo) and this
                target (not V(redeploy)), so that an undo an alert starts is refused after an undo (docs/undo.md).
            type: int
seealso:
  - module: gpuops.sglang.sglang_server
'''

EXAMPLES = r'''
- name: Arm the guard before stopping the server
  gpuops.sglang.sglang_guard:
    state: armed
    folder: /var/lib/gpuops-sglang/sglang
    run_id: "{{ ansible_run_id | default(lookup('ansible.builtin.pipe', 'date +%s%N')) }}"
    deadline: 1800
    idle: 90
    files:
      - /etc/sglang/launch.json
      - /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker.py
    server:
      manager: systemd
      service_name: sglang
      launch_file: /etc/sglang/launch.json
      pidfile: /run/sglang/sglang.pid
      log_file: /var/log/sglang/server.log
      url: http://127.0.0.1:30000

- name: Confirm the new server (drops the guard)
  gpuops.sglang.sglang_guard:
    state: confirmed
    folder: /var/lib/gpuops-sglang/sglang
    run_id: "{{ my_run_id }}"

- name: Roll back now
  gpuops.sglang.sglang_guard:
    state: restored
    folder: /var/lib/gpuops-sglang/sglang
    reason: the new server did not become healthy

- name: Show when the guard acts
  gpuops.sglang.sglang_guard:
    state: query
    folder: /var/lib/gpuops-sglang/sglang
  register: guard
'''

RETURN = r'''
armed:
  description: Whether a guard is armed at the end (in check mode, now).
  returned: always
  type: bool
armed_by:
  description: Run id of the armed guard (null when none).
  returned: always
  type: str
deadline_at:
  description: >-
    The armed guard's deadline (seconds since the epoch, host wall clock as it reads now, see RV(lease.deadline_at);
    null when none).
  returned: always
  type: float
fired:
  description: The report of the restore done by this task (null when none was done).
  returned: always
  type: dict
  contains:
    run_id:
      description: The run that armed the guard.
      type: str
    host:
      description: The host's inventory name given in O(host) when armed.
      type: str
    hostname:
      description: The host's own name.
      type: str
    acted_by:
      description: >-
        Who restored: V(controller) (the arming run), V(takeover) (a later run), V(on_demand) (an operator), or the
        watcher, named by its bound, V(idle) or V(deadline).
      type: str
    bound:
      description: >-
        Which bound fired: V(idle) (nothing renewed the lease for the idle bound), V(deadline), or who asked,
        V(controller), V(takeover), V(on_demand).
      type: str
    status:
      description: >-
        V(rolled_back) when every file was written back and the previous server answers C(/health) again,
        V(failed) otherwise. When a file could not be written back (RV(fired.failed_files)), no server is started
        on the mixed tree and the guard stays armed, marked as owed a restore, with its backups: a later
        O(state=restored) finishes it, and no arm, confirm or lease renewal of the run goes through meanwhile.
      type: str
    healthy:
      description: Whether the previous server answered C(/health) after the restore.
      type: bool
    reason:
      description: Why the restore was done.
      type: str
    restored_files:
      description: Files written back (or removed, when they did not exist before).
      type: list
      elements: str
    files:
      description: >-
        Each file of O(files) with its outcome, V(restored), V(removed), V(unchanged) or V(failed), and the error
        (null unless failed). Each file is restored on its own: one that cannot be written never keeps the others.
      type: list
      elements: dict
      contains:
        path:
          description: The file.
          type: str
        outcome:
          description: V(restored), V(removed), V(unchanged) or V(failed).
          type: str
        error:
          description: Why it could not be written back (null unless V(failed)).
          type: str
    failed_files:
      description: >-
        The files that could not be written back, and those the restore never reached when it stopped before the
        end of its file list (their error says so); the guard stays owed a restore while any is listed.
      type: list
      elements: dict
      contains:
        path:
          description: The file.
          type: str
        error:
          description: Why it could not be written back.
          type: str
    killed:
      description: The processes the restore stopped after the server (O(kill_patterns)).
      type: list
      elements: dict
      contains:
        pid:
          description: Its PID.
          type: int
        user:
          description: The user it ran as (the server's).
          type: str
        cmdline:
          description: Its command line, arguments joined by spaces.
          type: str
        signal:
          description: The last signal sent, V(TERM) or V(KILL).
          type: str
    spared:
      description: >-
        The processes matching O(kill_patterns) that the restore left running as another server's (O(neighbours)), with
        why.
      type: list
      elements: dict
      contains:
        pid:
          description: Its PID.
          type: int
        cmdline:
          description: Its command line, arguments joined by spaces.
          type: str
        why:
          description: What it carries that is another server's, or why nobody can tell whose it is.
          type: str
    steps:
      description: The restore steps that succeeded, in order.
      type: list
      elements: str
    problems:
      description: The steps that failed, each with its error.
      type: list
      elements: str
    timings:
      description: Seconds each step took, by step.
      type: dict
    started_at:
      description: When the restore began (seconds since the epoch, host clock).
      type: float
    finished_at:
      description: When it ended (host clock).
      type: float
    healthy_at:
      description: When the previous server first answered C(/health) (host clock); null when it did not.
      type: float
    downtime_s:
      description: Seconds from the stop to that answer; null when unknown.
      type: float
    router_readmitted:
      description: Whether the restored server was put back into O(router) (null when no router was given).
      type: bool
    router_problem:
      description: Why it was not put back (null when it was, or when no router was given).
      type: str
    files_handled:
      description: >-
        Whether the restore handled every file of the guard. Only then (and with no file failed) is the guard
        dropped; otherwise it stays owed a restore, with its backups, and RV(fired.problems) says why.
      type: bool
lease:
  description: >-
    The armed guard's lease (null when no guard is armed). Times without C(_boot) are seconds since the epoch on the
    host's wall clock, for display: RV(lease.armed_at) and RV(lease.renewed_at) as it read then; the times to come
    as it reads now (carried over from the boot clock, so a clock stepped since the arm does not shift them). The
    C(_boot) ones are the host's boot-clock readings the watcher counts on (null for a guard armed by an earlier
    release, and for the times to come of a guard armed before the host's last boot).
  returned: always
  type: dict
  contains:
    armed_at:
      description: When the guard was armed.
      type: float
    idle:
      description: The idle bound in seconds (null for a guard without a lease).
      type: float
    renewed_at:
      description: The last renewal (the arm counts as one).
      type: float
    renewed_by:
      description: The step that renewed last.
      type: str
    expires_at:
      description: When the lease lapses unless renewed (null without an idle bound).
      type: float
    deadline_at:
      description: The deadline.
      type: float
    acts_at:
      description: When the watcher acts unless renewed or confirmed, the earlier of RV(lease.expires_at) and the deadline.
      type: float
    acts_in:
      description: >-
        Seconds from the query until the watcher acts unless renewed or confirmed (0 when it is due, as a guard armed
        before the host's last boot is).
      type: float
    boot_id:
      description: The boot of the host the guard was armed in (C(/proc/sys/kernel/random/boot_id)).
      type: str
    armed_at_boot:
      description: RV(lease.armed_at) on the boot clock.
      type: float
    renewed_at_boot:
      description: RV(lease.renewed_at) on the boot clock.
      type: float
    expires_at_boot:
      description: RV(lease.expires_at) on the boot clock.
      type: float
    deadline_at_boot:
      description: RV(lease.deadline_at) on the boot clock.
      type: float
    acts_at_boot:
      description: RV(lease.acts_at) on the boot clock.
      type: float
last_fired:
  description: >-
    The report of the last restore on this host, by anyone (null when there never was one); the same keys as
    RV(fired).
  returned: always
  type: dict
revision:
  description: >-
    What O(state=confirmed) recorded with O(revisions) (null when not asked, in check mode, or for another state).
  returned: always
  type: dict
  contains:
    recorded:
      description: Whether a revision was written (false when nothing changed, and when the recording failed).
      type: bool
    number:
      description: The revision of this run (null when none was written).
      type: int
    numbers:
      description: The revisions written, V([1, 2]) on a first recording (revision 1 is the state found).
      type: list
      elements: int
    pruned:
      description: The revisions removed to keep O(revisions.kept).
      type: list
      elements: int
    size_bytes:
      description: Bytes the revision of this run takes on disk.
      type: int
    files:
      description: The files the run changed, each with its change (V(created), V(removed), V(modified), V(mode changed)...).
      type: list
      elements: dict
      contains:
        path:
          description: The file.
          type: str
        change:
          description: What the run did to it.
          type: str
    kept:
      description: How many revisions are kept.
      type: int
    problem:
      description: Why no revision was recorded although the run changed files ("" otherwise); also a warning.
      type: str
cmd:
  description: The commands run, as argv lists.
  returned: always
  type: list
  elements: list
'''

import os
import pkgutil
import sys
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import (
    Guard, GuardError, PACKAGE, pending_message, service_name_problem,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import arm_problem
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._revisions import record_confirmed
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import NEIGHBOURS_OPTION
from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, run_module
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import SERVER_OPTIONS

SERVER_KEYS = ('manager', 'service_name', 'launch_file', 'pidfile', 'log_file', 'url', 'term_timeout', 'user', 'group')
# The server as the guard records it: sglang_server's own options (one spec).
SERVER_SPEC = dict(
    SERVER_OPTIONS,
    manager=dict(type='str', required=True, choices=['systemd', 'detached']),
    log_file=dict(type='path', required=True),
    term_timeout=dict(type='float', default=30),
)
ARGUMENT_SPEC = dict(
    state=dict(type='str', default='query', choices=['armed', 'confirmed', 'restored', 'query']),
    folder=dict(type='path', required=True),
    run_id=dict(type='str'),
    deadline=dict(type='float', default=1800),
    idle=dict(type='float'),
    after=dict(type='float', default=0),
    trigger=dict(type='str', choices=['controller', 'takeover', 'on_demand']),
    files=dict(type='list', elements='path', default=[]),
    server=dict(type='dict', options=SERVER_SPEC),
    host=dict(type='str', default=''),
    kill_patterns=dict(type='list', elements='str', default=[]),
    # Recorded at the arm: the restore ends the server's own leftovers only, lists the others in fired.spared.
    neighbours=NEIGHBOURS_OPTION,
    window_folder=dict(type='path'),
    health_timeout=dict(type='float', default=900),
    max_used_mib=dict(type='int', default=0),
    memory_timeout=dict(type='float', default=60),
    gpus=dict(type='list', elements='str', default=[]),
    stop_marker=dict(type='path'),
    router=dict(type='dict', options=dict(
        url=dict(type='str', required=True),
        worker_url=dict(type='str', required=True),
        api_key=dict(type='str', no_log=True),
        timeout=dict(type='float', default=30),
        drain_timeout=dict(type='float', default=0),
    )),
    reason=dict(type='str', default='restore requested'),
    lock_timeout=dict(type='float', default=60),
    revisions=dict(type='dict', options=dict(
        kept=dict(type='int', default=5),
        margin_mib=dict(type='int', default=256),
        meta=dict(type='dict', default={}, options=dict(
            sglang_version=dict(type='str'),
            found_sglang_version=dict(type='str'),
            patch_sha256=dict(type='str'),
            report=dict(type='dict'),
            undo_to=dict(type='int'),
        )),
    )),
)


def arm(module: AnsibleModule, guard: Guard, current: dict[str, Any] | None, result: dict[str, Any]) -> None:
    params = module.params
    # The spec requires every key; url "" is a rank > 0 of a multi-node server, which serves no HTTP (its health is
    # its process running). Recorded under the spec's names only (not an alias also given).
    given = {key: params['server'][key] for key in SERVER_KEYS}
    if service_name_problem(given['service_name']):
        fail(service_name_problem(given['service_name']) + '; nothing was changed')
    if params['deadline'] <= 0:
        fail('deadline must be above 0 seconds')
    if params['idle'] is not None and params['idle'] < 0:
        fail('idle must not be negative (0: no lease, only the deadline)')
    if arm_problem(params['deadline'], params['idle'], params['after']):
        fail(arm_problem(params['deadline'], params['idle'], params['after']) + '; nothing was armed')
    if current is not None:
        fail(pending_message(current))
    result['changed'] = True
    if module.check_mode:
        return
    guard.install_runtime(lambda name: pkgutil.get_data(PACKAGE, name))
    settings = dict(kill_patterns=params['kill_patterns'], health_timeout=params['health_timeout'],
                    term_timeout=given['term_timeout'],
                    nvidia_smi=module.get_bin_path('nvidia-smi'), max_used_mib=params['max_used_mib'],
                    gpu_timeout=params['memory_timeout'], stop_marker=params['stop_marker'],
                    router=params['router'], neighbours=params['neighbours'], gpus=params['gpus'])
    guard.arm(params['run_id'], params['deadline'], params['files'], given,
              params['host'], sys.executable, settings, systemd=os.path.isdir('/run/systemd/system'),
              idle_s=params['idle'], after_s=params['after'], window_folder=params['window_folder'])


def confirm(module: AnsibleModule, guard: Guard, current: dict[str, Any] | None, result: dict[str, Any]) -> None:
    options = module.params['revisions']
    if options is not None and (options['kept'] < 0 or options['margin_mib'] < 0):
        fail('revisions.kept (%s) and revisions.margin_mib (%s) must not be negative (kept 0 records none); nothing '
             'was confirmed' % (options['kept'], options['margin_mib']))
    if module.check_mode:
        result['changed'] = current is not None and current.get('run_id') == module.params['run_id']
        return
    recording = {}

    def record(state: dict[str, Any]) -> None:
        # Under the guard's lock, while its pre-run bytes are still kept; record_confirmed never raises.
        meta = {key: value for key, value in (options['meta'] or {}).items() if value is not None}
        recording.update(record_confirmed(module.params['folder'], state, options['kept'],
                                          options['margin_mib'] * 1024 * 1024, meta))
    confirmed, fired = guard.confirm(module.params['run_id'], record if options is not None else None)
    if recording:
        result['revision'] = recording
        if recording['problem']:
            module.warn(recording['problem'])
    if not confirmed:
        result['fired'] = fired
        fail('the guard acted before the run confirmed the new server (%s): %s; the host now %s'
             % (fired.get('acted_by'), fired.get('reason'),
                'serves the previous server' if fired.get('healthy') else 'serves nothing'))
    result['changed'] = True


def restore(module: AnsibleModule, guard: Guard, current: Any, result: dict[str, Any]) -> None:
    params = module.params
    # A guard armed by another run is that run's to restore (or a later takeover's): nothing changes.
    if current is None or (params['run_id'] and current.get('run_id') != params['run_id']):
        return
    result['changed'] = True
    if module.check_mode:
        return
    trigger = params['trigger'] or ('controller' if params['run_id'] else 'takeover')
    report = guard.restore(params['reason'], trigger, run_id=params['run_id'])
    result['fired'] = report
    if report is not None and not report['healthy']:
        fail('the rollback did not bring the previous server back: %s' % '; '.join(report['problems']))


def report_guard(guard: Guard, result: dict[str, Any]) -> None:
    """The keys every run returns: whether a guard is armed now, by which run, and what the last one did."""
    try:
        state = guard.state()
        last_fired = guard.last_fired()
    except GuardError:
        # An unreadable state.json or a folder that is not safe: the failure that brought us here already says
        # so; a state file there counts as a guard armed (by a run nobody can name) until someone inspects it.
        result.update(armed=os.path.lexists(guard.state_path), armed_by=None, deadline_at=None, lease=None,
                      last_fired=None, cmd=guard.commands)
        return
    lease = guard.lease() if state is not None else None
    result.update(armed=state is not None, armed_by=state.get('run_id') if state else None,
                  deadline_at=lease['deadline_at'] if lease else None, lease=lease,
                  last_fired=last_fired, cmd=guard.commands)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[('state', 'armed', ['run_id', 'server']), ('state', 'confirmed', ['run_id'])])
    params = module.params
    # One deadline per command: a wedged systemd or a hung tool must not hang the task.
    guard = Guard(params['folder'], runner=CommandRunner(module, 60).as_runner(), lock_timeout=params['lock_timeout'])
    result = new_result(armed=False, armed_by=None, deadline_at=None, lease=None, fired=None, last_fired=None, revision=None,
                        cmd=[])
    actions = dict(armed=arm, confirmed=confirm, restored=restore, query=lambda *args: None)

    def body() -> None:
        # Every state reads through the trust check first: a folder another user could write is refused
        # before anything is read from it or stopped.
        current = guard.state()
        actions[params['state']](module, guard, current, result)

    def describe(exc: Exception) -> str:
        if isinstance(exc, GuardError):
            return to_native(exc)
        return 'sglang_guard %s failed: %s' % (params['state'], to_native(exc))
    run_module(module, result, body, errors=(GuardError, CommandError, OSError, IOError, ValueError, KeyError),
               describe=describe, finish=lambda result: report_guard(guard, result))


if __name__ == '__main__':
    main()
