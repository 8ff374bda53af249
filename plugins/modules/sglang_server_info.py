#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_server_info
short_description: Everything a redeploy decision needs about one SGLang server, in one round trip
version_added: 0.2.0
description:
  - Reads, without changing anything, what decides whether an SGLang server must be redeployed, so that a
    run with nothing to change costs one module call per host, not one per question.
  - How the server is managed (systemd where C(/run/systemd/system) exists), whether its interpreter exists,
    whether it runs, answers C(/health) and reports the wanted settings in C(/server_info), which of the
    wanted configuration files differ from the live ones, and whether a rollback guard is armed.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.server
  - gpuops.sglang.server_api_key
attributes:
  check_mode:
    support: full
    details: The module never changes anything.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
options:
  manager:
    description:
      - How the server runs (the same option as M(gpuops.sglang.sglang_server)'s); V(auto) picks V(systemd) where
        the host runs it, V(detached) elsewhere.
      - With O(url=""), RV(healthy) is RV(running).
    type: str
    choices: [auto, systemd, detached]
    default: auto
  generate_probe:
    description:
      - Also send one real generation (one new token) to a healthy server, and say in RV(generates) whether it
        answered. On rank 0 of a server spanning several hosts, C(/health) still answers 200 when another rank
        is gone (sglang issue 4780), and a generation needs every rank.
    type: bool
    default: false
  generate_timeout:
    description: Seconds the generation of O(generate_probe) may take.
    type: float
    default: 30
  read_sglang_version:
    description:
      - Say in RV(sglang_version) which sglang O(python) imports even when no stamp proves the patch (one
        interpreter run to find its site-packages). The nodes of a server spanning several hosts must run the
        same release.
    type: bool
    default: false
  python:
    description: The server's interpreter; reported in RV(python_exists).
    type: path
  expected_server_info:
    description: Keys and values C(/server_info) must report.
    type: dict
    default: {}
  expected_environment:
    description: Environment variables the server must report under C(environment) in C(/server_info).
    type: dict
    default: {}
  configs:
    description:
      - Wanted configuration files, compared byte for byte with the live ones.
    type: list
    elements: dict
    default: []
    suboptions:
      label:
        description: Name of the file in RV(configs_changed).
        type: str
        required: true
      path:
        description: The live file.
        type: path
        required: true
      content:
        description: What the live file must hold. May carry secrets; never logged or returned.
        type: str
        required: true
      systemd_only:
        description: Compare it only where systemd manages the server (the unit file).
        type: bool
        default: false
  guard_folder:
    description: Folder of the M(gpuops.sglang.sglang_guard) for this server.
    type: path
  folders:
    description:
      - Folders the server's files live in; those that are not folders are listed in RV(folders_missing), those
        another user could write into in RV(folders_untrusted).
      - Read in the same round trip as the server, so that a caller needs no C(stat) per folder.
    type: list
    elements: path
    default: []
  launcher:
    description:
      - A file that must hold O(launcher.content) with mode C(0755) (the role's launcher);
        RV(launcher_current) says whether it does.
    type: dict
    suboptions:
      path:
        description: The installed file.
        type: path
        required: true
      content:
        description: What it must hold.
        type: str
        required: true
  patch_content:
    description:
      - The unified diff the server must carry. With O(patch_stamp), RV(patch) says whether the stamp
        M(gpuops.sglang.sglang_patch) wrote proves it applied, so that no dry run is needed.
    type: str
  patch_stamp:
    description: The stamp file M(gpuops.sglang.sglang_patch) writes (its O(gpuops.sglang.sglang_patch#module:stamp)).
    type: path
  readable_folders:
    description:
      - Folders the server loads (the role passes C(sglang_model_path) and C(sglang_draft_model_path) when
        C(sglang_user) is not root), checked B(as) O(user) and O(group) in a child process that drops to them
        (C(initgroups), C(setgid), C(setuid)). Each must exist, be a folder, be listable, and every regular file at
        its top level (links followed) must open for reading. Root's view proves nothing for another user (an NFS
        export with C(root_squash), a folder C(0700) of another owner).
      - A path that is not absolute (a hub id such as V(org/model), which SGLang downloads) or is empty is not
        checked, and is listed in RV(server_access.skipped).
      - Each failure is listed in RV(server_access.problems); the role's preflight
        (M(gpuops.sglang.sglang_decision)) refuses the host before anything stops when it is not empty.
    type: list
    elements: dict
    default: []
    suboptions:
      label:
        description: What the folder is, in the caller's words (the role names the variable).
        type: str
        required: true
      path:
        description: The folder (or a hub id).
        type: str
        required: true
  check_adaptive_tiers:
    description:
      - Read from the installed sglang's own source (found through O(python)) whether it takes
        C(--speculative-adaptive-config) as batch-size tiers, in RV(adaptive_tiers).
      - A release without them reads one flat set of candidate steps and ignores tier keys, so tiers meant to
        stop drafting at a batch size would have no effect.
    type: bool
    default: false
  machine_only:
    description:
      - Read only what the machine says (RV(machine)), not the server, its files or its guard; every other key keeps
        its value of a run that read nothing. The role's plan reads this way, before it renders the launch of a server
        that owns some GPUs, or that shares its machine with other servers (docs/colocated.md).
    type: bool
    default: false
  gpus:
    description:
      - GPUs to find on the machine, as nvidia-smi index or UUID (the role's C(sglang_gpus)). When given, or when a
        neighbour names any, RV(machine.gpus) lists every GPU nvidia-smi reports.
    type: list
    elements: str
    default: []
  neighbours:
    description:
      - Other servers on this machine (the role's plan names them from the inventory), whose sglang site-packages
        are found through their interpreter, as this server's is, in RV(machine.site_packages_of).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The server's inventory name.
        type: str
        required: true
      python:
        description: Its interpreter.
        type: str
        required: true
      gpus:
        description: Its GPUs (index or UUID).
        type: list
        elements: str
        default: []
  nvidia_smi:
    description: Path of nvidia-smi, for O(gpus). Found on E(PATH) when not given.
    type: path
  code_folder:
    description:
      - The server's sglang site-packages; when given and the server runs, RV(code_changed_since_start) says whether a
        file of its C(sglang) package changed after the server started (a neighbour's patch of a shared environment).
    type: path
seealso:
  - module: gpuops.sglang.sglang_server
  - module: gpuops.sglang.sglang_guard
'''

EXAMPLES = r'''
- name: What would a redeploy change?
  gpuops.sglang.sglang_server_info:
    launch_file: /etc/sglang/launch.json
    pidfile: /run/sglang/sglang.pid
    url: http://127.0.0.1:30000
    python: /opt/sglang/venv/bin/python
    expected_server_info:
      max_running_requests: 64
    configs:
      - label: launch configuration
        path: /etc/sglang/launch.json
        content: "{{ launch | to_nice_json(indent=2) ~ '\n' }}"
    guard_folder: /var/lib/gpuops-sglang/sglang
    folders: [/etc/sglang, /run/sglang, /var/log/sglang]
  register: server
'''

RETURN = r'''
service_manager:
  description: V(systemd) or V(detached).
  returned: always
  type: str
python_exists:
  description: Whether O(python) exists (true when not given).
  returned: always
  type: bool
running:
  description: Whether the server runs.
  returned: always
  type: bool
pid:
  description: Its main PID (null when it does not run).
  returned: always
  type: int
healthy:
  description:
    - Whether C(/health) answered 200, from a socket the server's own processes hold.
    - A port another process holds is not asked (nor sent the API key) and adds a warning naming that process.
  returned: always
  type: bool
mismatches:
  description: What C(/server_info) reports differently from what was asked (empty when unhealthy).
  returned: always
  type: list
  elements: str
configs_changed:
  description: Labels of the configuration files whose live content differs from the wanted one.
  returned: always
  type: list
  elements: str
generates:
  description: Whether one real generation answered (O(generate_probe)); null when not asked or for a server without HTTP.
  returned: always
  type: bool
generate_error:
  description: Why the generation of O(generate_probe) failed (null otherwise).
  returned: always
  type: str
sglang_version:
  description:
    - The sglang release O(python) imports, from its dist-info, when a stamp proves the patch or
      O(read_sglang_version) asks; null otherwise.
  returned: always
  type: str
guard_armed_by:
  description: Run id of an armed rollback guard (null when none).
  returned: always
  type: str
guard_last_fired:
  description: Report of the guard's last restore on this host (null when there never was one).
  returned: always
  type: dict
guard_router_owed:
  description:
    - The router a restore of the guard took the server out of and could not put it back into (null when none
      is owed); the next run with the same router puts the server back once it is verified. A readmission (a
      run's confirm, a later restore's) clears it.
  returned: always
  type: dict
  contains:
    router_url:
      description: The router.
      type: str
    worker_url:
      description: The server's URL as the restore knew it.
      type: str
    run_id:
      description: The run whose guard restored.
      type: str
    at:
      description: When the restore ended (seconds since the epoch).
      type: float
    why:
      description: Why the server was not put back.
      type: str
patch:
  description:
    - Whether the patch stamp proves O(patch_content) applied for O(python) (every patched file still holds
      the bytes recorded right after a verified apply). When it does not (or was not asked), only RV(patch.why)
      is set and the caller must dry-run the patch with M(gpuops.sglang.sglang_patch).
  returned: always
  type: dict
  contains:
    proven:
      description: Whether the stamp proves the patch applied.
      type: bool
    why:
      description: Why it does not (null when it does).
      type: str
    patch_sha256:
      description: SHA-256 of O(patch_content) as M(gpuops.sglang.sglang_patch) computes it (null when not asked).
      type: str
    site_packages:
      description: The folder the patch was applied in (null unless proven).
      type: str
    files:
      description: The patched files, relative to RV(patch.site_packages) (empty unless proven).
      type: list
      elements: str
    sglang_version:
      description: Installed sglang version from its dist-info (null unless proven).
      type: str
adaptive_tiers:
  description:
    - Whether the installed sglang reads batch-size tiers from C(--speculative-adaptive-config) (0.5.23 does,
      0.5.12.post1 does not); null when not asked (O(check_adaptive_tiers)) or when it cannot be told.
  returned: always
  type: bool
folders_missing:
  description:
    - The paths of O(folders) that are not folders, in their order (a link to a folder is that folder; a file
      under that name is listed too).
  returned: always
  type: list
  elements: str
folders_untrusted:
  description:
    - The paths of O(folders) that another user could write into, in their order, each with why. The rule is the
      guard's, every folder from C(/) down to the path is owned by this module's user or root and writable by
      neither its group nor others (a folder not made yet counts as trusted, only its parent's owner can make it).
      One exception, for Ubuntu's C(/var/log) (C(root:syslog), mode 0775), C(/var/log) itself (no other folder)
      is trusted although its group may write it, when it has no ACL and every account that writes through that
      group is a system account (uid 1 to 999, such as C(syslog)).
    - In such a folder another user could link the server's log to a file of root's, and the server's output,
      appended as root, would land in that file (systemd's C(StandardOutput=append:) follows the link).
    - The role's preflight (M(gpuops.sglang.sglang_decision)) refuses the host when this is not empty.
  returned: always
  type: list
  elements: dict
  contains:
    folder:
      description: The path as given in O(folders).
      type: str
    why:
      description: Which folder on the way fails the rule, and its owner or mode.
      type: str
  sample: [{folder: /var/log/sglang, why: "/var/log is writable by its group (mode 0775)"}]
server_access:
  description:
    - Who the server runs as and what of O(readable_folders) that user cannot load, checked as that user.
    - A user or group that does not exist on the host is one problem (label V(user) or V(group), path null).
  returned: always
  type: dict
  contains:
    user:
      description: The user the server runs as (O(user), else the user this module runs as); null when it does not exist.
      type: str
    group:
      description: Its group (O(group), else the user's primary group); null when either does not exist.
      type: str
    checked:
      description: The absolute paths of O(readable_folders) checked as that user, in their order.
      type: list
      elements: str
    skipped:
      description: The entries of O(readable_folders) not checked, each with why (a hub id, an empty path).
      type: list
      elements: dict
      contains:
        label:
          description: The entry's label.
          type: str
        path:
          description: The entry's path.
          type: str
        why:
          description: Why it was not checked.
          type: str
    problems:
      description: What the user cannot load, each with the path and what failed; empty when everything can be.
      type: list
      elements: dict
      contains:
        label:
          description: The entry's label (V(user) or V(group) for an identity that does not exist).
          type: str
        path:
          description: The folder (null for an identity that does not exist).
          type: str
        why:
          description: What failed (does not exist, is not a folder, cannot be listed, files that cannot be opened).
          type: str
  sample:
    user: sglang
    group: sglang
    checked: [/models/Llama-3.1-70B-Instruct]
    skipped: [{label: sglang_draft_model_path, path: org/draft, why: "not an absolute path (a hub id): SGLang downloads it"}]
    problems: [{label: sglang_model_path, path: /models/Llama-3.1-70B-Instruct, why: "cannot be listed (Permission denied)"}]
launcher_current:
  description: Whether O(launcher.path) holds O(launcher.content) with mode C(0755); null when O(launcher) is not given.
  returned: always
  type: bool
machine:
  description:
    - What the machine says, for servers that share one (docs/colocated.md); read in every run.
  returned: always
  type: dict
  contains:
    machine_id:
      description: The content of C(/etc/machine-id) (a Proxmox container has its own); null when it cannot be read.
      type: str
    gpus:
      description: Every GPU nvidia-smi reports, when O(gpus) or a neighbour names any; else empty.
      type: list
      elements: dict
      contains:
        index:
          description: Its index as nvidia-smi numbers them (PCI bus order).
          type: int
        uuid:
          description: Its UUID.
          type: str
    gpus_error:
      description: Why the GPUs could not be read (null when they were, or were not asked).
      type: str
    site_packages:
      description: The folder holding the sglang of O(python), when O(neighbours) is given (null otherwise or when not found).
      type: str
    site_packages_of:
      description: The sglang folder of each of O(neighbours), in their order.
      type: list
      elements: dict
      contains:
        name:
          description: The neighbour's O(neighbours[].name).
          type: str
        site_packages:
          description: The folder holding the sglang of its interpreter (null when not found).
          type: str
code_changed_since_start:
  description:
    - Whether a file of the C(sglang) package in O(code_folder) is newer than the running server's start; null when
      not asked, or the server does not run.
  returned: always
  type: bool
cmd:
  description: The commands run, as argv lists.
  returned: always
  type: list
  elements: list
'''

import hashlib
import os
import stat
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import distrust, read_bytes
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import Guard, GuardError
from ansible_collections.gpuops.sglang.plugins.module_utils.base._identity import UnknownIdentity, folder_problems, identity
from ansible_collections.gpuops.sglang.plugins.module_utils._module import new_result, run_module
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._patching import (
    adaptive_tiers_supported,
    diff_bytes,
    discover_site_packages,
    read_dist_version,
    read_stamp,
    sha256_bytes,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import SERVER_OPTIONS, Server, ServerError
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import GpuReader, NvidiaSmiError

ARGUMENT_SPEC = dict(
    SERVER_OPTIONS,
    # `manager`, as sglang_server names it; `service_manager`, the name this module had, still works.
    manager=dict(type='str', default='auto', choices=['auto', 'systemd', 'detached']),
    python=dict(type='path'),
    expected_server_info=dict(type='dict', default={}),
    expected_environment=dict(type='dict', default={}),
    configs=dict(type='list', elements='dict', default=[], options=dict(
        label=dict(type='str', required=True),
        path=dict(type='path', required=True),
        # The launch configuration carries the secret environment, the API keys file the keys.
        content=dict(type='str', required=True, no_log=True),
        systemd_only=dict(type='bool', default=False),
    )),
    guard_folder=dict(type='path'),
    folders=dict(type='list', elements='path', default=[]),
    launcher=dict(type='dict', options=dict(
        path=dict(type='path', required=True),
        content=dict(type='str', required=True),
    )),
    patch_content=dict(type='str'),
    patch_stamp=dict(type='path'),
    readable_folders=dict(type='list', elements='dict', default=[], options=dict(
        label=dict(type='str', required=True),
        path=dict(type='str', required=True),
    )),
    check_adaptive_tiers=dict(type='bool', default=False),
    read_sglang_version=dict(type='bool', default=False),
    generate_probe=dict(type='bool', default=False),
    generate_timeout=dict(type='float', default=30),
    machine_only=dict(type='bool', default=False),
    gpus=dict(type='list', elements='str', default=[]),
    neighbours=dict(type='list', elements='dict', default=[], options=dict(
        name=dict(type='str', required=True),
        python=dict(type='str', required=True),
        gpus=dict(type='list', elements='str', default=[]),
    )),
    nvidia_smi=dict(type='path'),
    code_folder=dict(type='path'),
)


# The mode the role installs the launcher with (it is systemd's ExecStart, and run by hand).
LAUNCHER_MODE = 0o755


def _sha256_of_file(path: str) -> str | None:
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except OSError:
        return None


def holds(path: str, content: str) -> bool:
    """Whether the file at `path` holds `content`, byte for byte (False when it cannot be read)."""
    return _sha256_of_file(path) == hashlib.sha256(to_bytes(content)).hexdigest()


def configs_changed(configs: list[Any], manager: str) -> list[Any]:
    """Labels of the configuration files whose content on the host is not the wanted one."""
    changed = []
    for config in configs:
        if config['systemd_only'] and manager != 'systemd':
            continue
        if not holds(config['path'], config['content']):
            changed.append(config['label'])
    return changed


def folders_missing(folders: list[Any]) -> list[Any]:
    """The folders a caller must make: os.path.isdir follows a link, so a link to a folder is found; anything
    else under the name is listed, and making the folder there then fails and says why."""
    return [path for path in folders if not os.path.isdir(path)]


def folders_untrusted(folders: list[Any]) -> list[Any]:
    """[{folder, why}] for the folders another user could write into (the guard's trust rule, _files.distrust):
    the server's output is appended there as root, the pid file and the configuration written there."""
    refused = []
    for path in folders:
        why = distrust(path, system_group_writers=True)
        if why:
            refused.append({'folder': path, 'why': why})
    return refused


def no_access_read() -> dict[str, None]:
    """server_access before anything was read (the same keys on every run)."""
    return {'user': None, 'group': None, 'checked': [], 'skipped': [], 'problems': []}


def server_access(user: str | None, group: str | None, folders: list[Any]) -> dict[str, Any]:
    """Who the server runs as, and what of `folders` ([{label, path}]) it cannot load, checked as that user. A hub id
    (not an absolute path) or an empty path is skipped: SGLang downloads a hub id, there is no folder to check."""
    access = no_access_read()
    try:
        who = identity(user, group)
    except UnknownIdentity as exc:
        access['problems'].append({'label': exc.kind, 'path': None, 'why': str(exc)})
        return access
    access.update(user=who.user, group=who.group)
    local = []
    for entry in folders:
        if not entry['path']:
            access['skipped'].append(dict(entry, why='empty: no folder'))
        elif not os.path.isabs(entry['path']):
            access['skipped'].append(dict(entry, why='not an absolute path (a hub id): SGLang downloads it'))
        else:
            local.append(entry)
    access['checked'] = [entry['path'] for entry in local]
    access['problems'] = folder_problems(who, local)
    return access


def launcher_current(launcher: dict[str, str] | None) -> bool | None:
    """Whether the launcher is installed as wanted (None when not asked): its bytes, and 0755."""
    if launcher is None:
        return None
    try:
        if stat.S_IMODE(os.stat(launcher['path']).st_mode) != LAUNCHER_MODE:
            return False
    except OSError:
        return False
    return holds(launcher['path'], launcher['content'])


def patch_state(content: str | None, stamp_path: str | None, python: str | None) -> dict[str, Any]:
    """What the stamp proves about the wanted patch; the same keys whatever the answer."""
    state = dict(proven=False, why='no patch or stamp was given', patch_sha256=None, site_packages=None, files=[],
                 sglang_version=None)
    if content is None or not stamp_path:
        return state
    state['patch_sha256'] = sha256_bytes(diff_bytes(content))
    stamp, state['why'] = read_stamp(stamp_path, state['patch_sha256'], python)
    if stamp is not None:
        state.update(proven=True, site_packages=stamp['site_packages'],
                     files=[entry['path'] for entry in stamp['files']],
                     sglang_version=read_dist_version(stamp['site_packages']))
    return state


def adaptive_tiers(commands: CommandRunner, python: str, tmpdir: str, site_packages: str | None = None) -> bool | None:
    """What the installed sglang makes of adaptive tiers; site_packages from a proven stamp saves a python run."""
    if site_packages is None:
        if not python or not os.path.exists(python):
            return None
        site_packages = discover_site_packages(commands.run, python, tmpdir)[0]
        if site_packages is None:
            return None
    return adaptive_tiers_supported(site_packages)


MACHINE_ID = '/etc/machine-id'
# Clock ticks per second of /proc/PID/stat's start time.
CLOCK_TICKS = os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100


def no_machine_read() -> dict[str, Any]:
    """machine before anything was read (the same keys on every run)."""
    return {'machine_id': None, 'gpus': [], 'gpus_error': None, 'site_packages': None, 'site_packages_of': []}


def machine_id(path: str = MACHINE_ID) -> str | None:
    try:
        return read_bytes(path).decode('ascii', 'replace').strip() or None
    except OSError:
        return None


def read_machine(module: AnsibleModule, commands: CommandRunner) -> dict[str, Any]:
    """The machine's identity, its GPUs (when any server of it names some) and each server's sglang folder."""
    params = module.params
    machine = no_machine_read()
    machine['machine_id'] = machine_id()
    if params['gpus'] or any(entry['gpus'] for entry in params['neighbours']):
        path = params['nvidia_smi'] or module.get_bin_path('nvidia-smi')
        if path is None:
            machine['gpus_error'] = 'nvidia-smi is not on PATH (set nvidia_smi)'
        else:
            try:
                machine['gpus'] = [{'index': gpu['index'], 'uuid': gpu['uuid']}
                                   for gpu in GpuReader(commands, path).gpus() if gpu['uuid']]
            except (CommandError, NvidiaSmiError) as exc:
                machine['gpus_error'] = to_native(exc)
    if params['neighbours']:
        found: dict[str, str | None] = {}

        def site_packages(python: str) -> str | None:
            # Two servers run from one interpreter more often than not: ask each once.
            if python not in found:
                found[python] = (discover_site_packages(commands.run, python, module.tmpdir)[0]
                                 if python and os.path.exists(python) else None)
            return found[python]
        machine['site_packages'] = site_packages(params['python'] or '')
        machine['site_packages_of'] = [{'name': entry['name'], 'site_packages': site_packages(entry['python'])}
                                       for entry in params['neighbours']]
    return machine


def started_at(pid: int) -> float | None:
    """When a process started (seconds since the epoch), from /proc: its start in ticks after the boot, and the boot."""
    try:
        stat_line = read_bytes('/proc/%d/stat' % pid).decode('ascii', 'replace')
        # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
        ticks = int(stat_line.rsplit(')', 1)[1].split()[19])
        for line in read_bytes('/proc/stat').decode('ascii', 'replace').splitlines():
            if line.startswith('btime '):
                return int(line.split()[1]) + ticks / float(CLOCK_TICKS)
    except (OSError, IndexError, ValueError):
        return None
    return None


def code_changed_since(folder: str, since: float) -> bool:
    """Whether a file of the sglang package under `folder` was modified after `since` (a patch keeps no older mtime)."""
    for root, dummy, names in os.walk(os.path.join(folder, 'sglang')):
        for name in names:
            try:
                if os.lstat(os.path.join(root, name)).st_mtime > since:
                    return True
            except OSError:
                continue
    return False


def read_server(module: AnsibleModule, server: Server, params: dict[str, Any], result: dict[str, Any]) -> None:
    result['pid'] = server.main_pid()
    result['running'] = result['pid'] is not None
    result['healthy'] = result['running'] and server.health() == 200
    if server.foreign_listener_named():
        module.warn(server.foreign_listener)
    if result['healthy'] and server.serves_http and (params['expected_server_info'] or params['expected_environment']):
        result['mismatches'] = server.settings_or_why(params['expected_server_info'],
                                                      params['expected_environment'])[1]
    if params['generate_probe'] and server.serves_http:
        if result['healthy']:
            generated = server.generate_once(params['generate_timeout'])
            result.update(generates=generated['ok'], generate_error=generated['why'])
        else:
            result.update(generates=False, generate_error='the server is not healthy')


def read_guard(folder: str | None, runner: Callable, result: dict[str, Any]) -> None:
    if folder and os.path.isdir(folder):
        guard = Guard(folder, runner=runner)
        state = guard.state()
        result['guard_armed_by'] = state.get('run_id') if state else None
        result['guard_last_fired'] = guard.last_fired()
        result['guard_router_owed'] = guard.router_owed()


def read_state(module: AnsibleModule, commands: CommandRunner, server: Server, result: dict[str, Any]) -> None:
    params = module.params
    if params['python']:
        result['python_exists'] = os.path.exists(params['python'])
    result['configs_changed'] = configs_changed(params['configs'], result['service_manager'])
    result['folders_missing'] = folders_missing(params['folders'])
    result['folders_untrusted'] = folders_untrusted(params['folders'])
    result['launcher_current'] = launcher_current(params['launcher'])
    result['server_access'] = server_access(params['user'], params['group'], params['readable_folders'])
    read_server(module, server, params, result)
    result['patch'] = patch_state(params['patch_content'], params['patch_stamp'], params['python'])
    if params['check_adaptive_tiers']:
        result['adaptive_tiers'] = adaptive_tiers(commands, params['python'], module.tmpdir,
                                                  result['patch']['site_packages'])
    result['sglang_version'] = result['patch']['sglang_version']
    if result['sglang_version'] is None and params['read_sglang_version'] and result['python_exists']:
        site_packages = discover_site_packages(commands.run, params['python'], module.tmpdir)[0]
        result['sglang_version'] = read_dist_version(site_packages) if site_packages else None
    read_guard(params['guard_folder'], server.runner, result)
    if params['code_folder'] and result['pid'] is not None:
        since = started_at(result['pid'])
        result['code_changed_since_start'] = None if since is None else code_changed_since(params['code_folder'], since)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    # One deadline per command: a wedged systemd or a hung tool must not hang the task.
    commands = CommandRunner(module, 30)
    manager = params['manager']
    if manager == 'auto':
        manager = 'systemd' if os.path.isdir('/run/systemd/system') else 'detached'
    result = new_result(service_manager=manager, python_exists=True, running=False, pid=None,
                        healthy=False, mismatches=[], configs_changed=[], guard_armed_by=None, guard_last_fired=None,
                        guard_router_owed=None,
                        patch=patch_state(None, None, None), adaptive_tiers=None, generates=None,
                        generate_error=None, sglang_version=None, folders_missing=[], folders_untrusted=[],
                        launcher_current=None, server_access=no_access_read(), machine=no_machine_read(),
                        code_changed_since_start=None, cmd=[])
    server = Server(manager, params['service_name'], params['launch_file'], params['pidfile'], os.devnull,
                    params['url'], runner=commands.as_runner(), user=params['user'], group=params['group'])

    def finish(result: dict[str, Any]) -> None:
        result['cmd'] = commands.cmd

    def read() -> None:
        result['machine'] = read_machine(module, commands)
        if not params['machine_only']:
            read_state(module, commands, server, result)

    run_module(module, result, read,
               errors=(CommandError, GuardError, ServerError, OSError, ValueError), finish=finish,
               describe=lambda exc: 'reading the state of %s failed: %s' % (params['service_name'], to_native(exc)))


if __name__ == '__main__':
    main()
