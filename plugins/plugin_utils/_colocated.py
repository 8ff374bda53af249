# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several servers on one machine (issue 44): who a server's neighbours are, what they must not share, which GPUs
it owns, and whether its sglang environment is another server's too.

A server is one inventory host; servers on one machine share its address (and, in a Proxmox container, its
`pve_node` and `pve_vmid`). Servers in two containers of one Proxmox node are different machines for processes,
ports and files, but see the same GPUs. `server` records are what `server_record` makes of a host's variables.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_text

# nvidia-smi's UUIDs: GPU-<hex and dashes>, and MIG-<...> for a MIG instance.
UUID_PATTERN = re.compile(r'^(GPU|MIG)-[0-9A-Za-z-]+$')
INDEX_PATTERN = re.compile(r'^[0-9]+$')
# The variables a neighbour's record is made of (its own, else the role's defaults), and the inventory's own.
NEIGHBOUR_SETTINGS = ('sglang_port', 'sglang_service_name', 'sglang_config_dir', 'sglang_run_dir', 'sglang_log_file',
                      'sglang_guard_dir', 'sglang_gpus', 'sglang_python')
PLACEMENT = ('ansible_host', 'pve_node', 'pve_vmid')
GPU_VARIABLES = ('CUDA_DEVICE_ORDER', 'CUDA_VISIBLE_DEVICES')
# What two servers of one machine may never share, in the order they are named: (what, how it is read).
SHARED_THINGS = (
    ('port', lambda server: server['port']),
    ('service name', lambda server: server['service_name']),
    ('run folder', lambda server: server['run_dir']),
    ('config folder', lambda server: server['config_dir']),
    ('log file', lambda server: server['log_file']),
    ('guard folder', lambda server: server['guard_dir']),
)


def gpu_entries(gpus: Any) -> list[str]:
    """sglang_gpus as text (YAML gives an index as an int); [] for none."""
    return [as_text(entry).strip() for entry in (gpus or [])]


def gpus_problems(gpus: Any) -> list[str]:
    """What sglang_gpus may not hold: anything but an nvidia-smi index or a GPU/MIG UUID, or one GPU twice."""
    if gpus is not None and not isinstance(gpus, (list, tuple)):
        return ['sglang_gpus must be a list of GPU indices or UUIDs, not %s; write it as a list, e.g. [0, 1].'
                % as_text(gpus)]
    entries = gpu_entries(gpus)
    wrong = [entry for entry in entries if not INDEX_PATTERN.match(entry) and not UUID_PATTERN.match(entry)]
    problems = []
    if wrong:
        problems.append('sglang_gpus holds %s: each entry must be a GPU index as nvidia-smi numbers them (0, 1, ...) or'
                        ' a UUID as `nvidia-smi --query-gpu=index,uuid --format=csv` prints it (GPU-...).'
                        % ', '.join(repr(entry) for entry in wrong))
    twice = sorted(set(entry for entry in entries if entries.count(entry) > 1))
    if twice:
        problems.append('sglang_gpus names %s more than once; name each GPU once.' % ', '.join(twice))
    return problems


def environment_problems(settings: dict[str, Any]) -> list[str]:
    """A server that owns some GPUs has them set by the launch: an environment variable naming them too would race it."""
    if not gpu_entries(settings['sglang_gpus']):
        return []
    named = sorted(set(GPU_VARIABLES) & (set(settings['sglang_environment']) | set(settings['sglang_secret_environment'])))
    if not named:
        return []
    return ['sglang_environment or sglang_secret_environment sets %s, which sglang_gpus sets (to the UUIDs of its GPUs);'
            ' remove %s there.' % (', '.join(named), 'it' if len(named) == 1 else 'them')]


def server_record(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One server as its neighbours see it, from its (rendered) role variables and placement."""
    service = as_text(settings['sglang_service_name'])
    return {
        'name': name, 'port': as_text(settings['sglang_port']), 'service_name': service,
        'config_dir': as_text(settings['sglang_config_dir']).rstrip('/') or '/',
        'run_dir': as_text(settings['sglang_run_dir']).rstrip('/') or '/',
        'log_file': as_text(settings['sglang_log_file']),
        # The guard folder the role derives (_configs.paths): one per service under sglang_guard_dir.
        'guard_dir': '%s/%s' % (as_text(settings['sglang_guard_dir']).rstrip('/'), service),
        'gpus': gpu_entries(settings['sglang_gpus']), 'python': as_text(settings['sglang_python']),
        'ansible_host': as_text(settings.get('ansible_host') or name),
        'pve_node': as_text(settings.get('pve_node') or ''), 'pve_vmid': as_text(settings.get('pve_vmid') or ''),
    }


def same_machine(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether the inventory puts two servers on one machine: one address, and one container (or both bare metal)."""
    return (one['ansible_host'] == other['ansible_host'] and one['pve_node'] == other['pve_node']
            and one['pve_vmid'] == other['pve_vmid'])


def same_gpus(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two servers see the same GPUs: one machine, or two containers of one Proxmox node."""
    return same_machine(one, other) or bool(one['pve_node']) and one['pve_node'] == other['pve_node']


def neighbours(me: dict[str, Any], others: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The servers that share my machine or my GPUs, each with `same_machine` (False: another container of my
    Proxmox node, which shares only the GPUs), in the order given."""
    return [dict(other, same_machine=same_machine(me, other)) for other in others
            if other['name'] != me['name'] and same_gpus(me, other)]


def marks(near: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """{name, service_name, port, launch_file} of each neighbour on my machine: what marks its processes (the launch
    file where the role derives it, _configs.paths)."""
    return [{'name': other['name'], 'service_name': other['service_name'],
             'port': int(other['port']) if INDEX_PATTERN.match(other['port']) else other['port'],
             'launch_file': other['config_dir'].rstrip('/') + '/launch.json'}
            for other in near if other['same_machine']]


def overlaps(mine: list[str], theirs: list[str]) -> bool:
    """Whether two GPU sets share a GPU as written; an empty set is the whole machine and overlaps every set."""
    return not mine or not theirs or bool(set(mine) & set(theirs))


def gpu_words(gpus: list[str]) -> str:
    return '[%s]' % ', '.join(gpus) if gpus else 'every GPU (sglang_gpus empty)'


def conflicts(me: dict[str, Any], near: list[dict[str, Any]]) -> list[str]:
    """What the plan refuses before anything stops: a neighbour on my port or with one of my names or paths (one
    machine), or with a GPU of mine (as written: an index against an index, a UUID against a UUID; the machine's
    read compares them resolved). Each message names both servers."""
    problems = []
    for other in near:
        pair = '%s and %s' % (me['name'], other['name'])
        if other['same_machine']:
            for what, read in SHARED_THINGS:
                if read(me) == read(other):
                    problems.append('%s run on one machine (ansible_host %s) and share the %s %s; give each server its'
                                    ' own (one inventory host per server, each with its own sglang_port,'
                                    ' sglang_service_name, sglang_config_dir, sglang_run_dir and sglang_log_file).'
                                    % (pair, me['ansible_host'], what, read(me)))
        if overlaps(me['gpus'], other['gpus']):
            problems.append('%s share GPUs (%s): %s owns %s, %s owns %s. Set sglang_gpus of each to GPUs of its own.'
                            % (pair, 'one machine' if other['same_machine'] else 'Proxmox node %s' % me['pve_node'],
                               me['name'], gpu_words(me['gpus']), other['name'], gpu_words(other['gpus'])))
    return problems


def resolve(wanted: list[str], machine_gpus: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(the UUIDs of `wanted`, in its order; the entries the machine does not have). `machine_gpus` is the machine's
    [{index, uuid}] as nvidia-smi numbers them (PCI bus order)."""
    by_index = {as_text(gpu['index']): gpu['uuid'] for gpu in machine_gpus if gpu.get('uuid')}
    uuids = set(by_index.values())
    found, missing = [], []
    for entry in wanted:
        uuid = entry if entry in uuids else by_index.get(entry)
        (found if uuid else missing).append(uuid or entry)
    return found, missing


def machine_words(machine_gpus: list[dict[str, Any]]) -> str:
    return ', '.join('%s %s' % (gpu.get('index'), gpu.get('uuid')) for gpu in machine_gpus) or 'none'


def gpu_problems(me: dict[str, Any], near: list[dict[str, Any]], machine: dict[str, Any]) -> list[str]:
    """What the machine's own read refuses: a GPU of mine it does not have (or no reading at all), and a GPU I share
    with a neighbour once both sets are UUIDs (an index of one and the UUID of the other name the same GPU)."""
    if not me['gpus']:
        return []
    if machine.get('gpus_error'):
        return ['the GPUs of %s could not be read on its machine: %s. sglang_gpus needs nvidia-smi there.'
                % (me['name'], machine['gpus_error'])]
    gpus = machine.get('gpus') or []
    mine, missing = resolve(me['gpus'], gpus)
    if missing:
        return ['sglang_gpus of %s names %s, which its machine does not have (it has: %s). Name GPUs as nvidia-smi'
                ' numbers them there, or by UUID.' % (me['name'], ', '.join(missing), machine_words(gpus))]
    problems = []
    for other in near:
        theirs = resolve(other['gpus'], gpus)[0]
        shared = [uuid for uuid in mine if uuid in theirs]
        if other['gpus'] and shared:
            problems.append('%s and %s share GPUs: %s owns %s, %s owns %s, both %s on the machine. Set sglang_gpus of'
                            ' each to GPUs of its own.' % (me['name'], other['name'], me['name'],
                                                           gpu_words(me['gpus']), other['name'],
                                                           gpu_words(other['gpus']), ', '.join(shared)))
    return problems


def gpu_environment(uuids: list[str]) -> dict[str, str]:
    """What the launch sets for a server that owns some GPUs: the UUIDs resolved on the machine, which no other
    numbering can move (CUDA orders GPUs fastest first unless told the PCI bus order, as nvidia-smi numbers them)."""
    if not uuids:
        return {}
    return dict(zip(GPU_VARIABLES, ('PCI_BUS_ID', ','.join(uuids))))


def confirmed(me: str, my_machine: dict[str, Any], near: list[dict[str, Any]],
              machines: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(the neighbours on my machine by the inventory that their machine's read confirms or could not be asked:
    not in the play; those whose read names another machine). `machines` holds the read of each play host that has
    one."""
    mine = my_machine.get('machine_id')
    kept, others = [], []
    for other in near:
        if not other['same_machine']:
            continue
        theirs = (machines.get(other['name']) or {}).get('machine_id')
        (others if mine and theirs and theirs != mine else kept).append(other['name'])
    return kept, others


def unnamed_neighbours(me: str, my_machine: dict[str, Any], near: list[dict[str, Any]],
                       machines: dict[str, dict[str, Any]]) -> list[str]:
    """Play hosts whose machine says they run on mine although the inventory does not put them there (another
    address for the same machine): the plan could not check them against me."""
    mine = my_machine.get('machine_id')
    named = set(other['name'] for other in near if other['same_machine'])
    return sorted(name for name, machine in machines.items()
                  if mine and name != me and name not in named and (machine or {}).get('machine_id') == mine)


def shared_environment(me: str, site_packages: str | None, near: list[dict[str, Any]], kept: list[str],
                       play_hosts: list[str]) -> dict[str, Any]:
    """{site_packages, with, outside_run}: the neighbours (confirmed on my machine) whose sglang is mine, and those of
    them outside the run (ansible_play_hosts_all)."""
    with_me = [other['name'] for other in near
               if other['name'] in kept and site_packages and other.get('site_packages') == site_packages]
    return {'site_packages': site_packages, 'with': with_me,
            'outside_run': [name for name in with_me if name not in play_hosts]}


def shared_patch_problem(me: str, shared: dict[str, Any]) -> str:
    """Why a patch due on my sglang is refused: it would change the code of neighbours that are not redeployed in
    this run (each would load it at its next start, unverified). '' when every server using it is in the run."""
    if not shared['outside_run']:
        return ''
    return ('the patch would change the sglang of %s in %s, which %s also run%s from and which %s not in this run.'
            ' Redeploy them together (add %s to the run; the patch is applied once and each server restarts in its'
            ' own window), or give %s its own environment (its own sglang_python: docs/colocated.md).'
            % (me, shared['site_packages'], ', '.join(shared['with']), '' if len(shared['with']) > 1 else 's',
               'are' if len(shared['outside_run']) > 1 else 'is', ', '.join(shared['outside_run']), me))


def restores_shared_code(near: list[dict[str, Any]], kept: list[str], undo_files: list[str]) -> list[dict[str, Any]]:
    """The files an undo would put back inside the sglang of a neighbour confirmed on my machine, per site-packages:
    [{site_packages, neighbours, files}], in the order the neighbours are named. Every neighbour's site-packages counts,
    not only the one this server runs from now: its older revisions may name files of an environment it left (a server
    moved to its own venv) that a neighbour still runs from."""
    found: list[dict[str, Any]] = []
    for other in near:
        site = (other.get('site_packages') or '').rstrip('/')
        if other['name'] not in kept or not site:
            continue
        same = [entry for entry in found if entry['site_packages'] == site]
        if same:
            same[0]['neighbours'].append(other['name'])
            continue
        files = [path for path in undo_files if path.startswith(site + '/')]
        if files:
            found.append({'site_packages': site, 'neighbours': [other['name']], 'files': files})
    return found


def shared_undo_problem(me: str, site_packages: str | None, near: list[dict[str, Any]], kept: list[str],
                        undo_files: list[str]) -> str:
    """Why an undo is refused: it would put back sglang files that a neighbour runs from. Unlike a patch, an undo
    cannot take them along (each server's revisions are its own, and the second server's undo would find the files
    the first one put back changed by hand), whether they are in the run or not."""
    mine = (site_packages or '').rstrip('/')
    sentences = []
    for shared in restores_shared_code(near, kept, undo_files):
        files, others = shared['files'], shared['neighbours']
        found = ('the undo would put back %d file%s of the sglang in %s (%s), which %s also run%s from: their code would'
                 ' change under them.' % (len(files), '' if len(files) == 1 else 's', shared['site_packages'],
                                          ', '.join(files[:3]) + (', ...' if len(files) > 3 else ''), ', '.join(others),
                                          '' if len(others) > 1 else 's'))
        if shared['site_packages'] == mine:
            advice = (' Redeploy %s together with the patch you want instead (it is applied once and each server restarts'
                      ' in its own window), or give %s its own environment (its own sglang_python: docs/colocated.md).'
                      % (' and '.join([me] + others), me))
        else:
            advice = (' %s runs from %s now, so these files are no longer its own: undo to a revision recorded since'
                      ' it moved there, or redeploy it instead (docs/colocated.md).' % (me, mine or 'another environment'))
        sentences.append(found + advice)
    return ' '.join(sentences)


def decide(me: str, colocated: dict[str, Any], state: dict[str, Any], machines: dict[str, dict[str, Any]],
           play_hosts: list[str], patch_due: bool, undo_files: list[str] | None = None) -> dict[str, Any]:
    """What the decision says of the machine this server shares, after the state read: the neighbours the machines
    confirm, those they deny, the environment shared with them, the play hosts elsewhere in the inventory that report
    this machine's machine-id, and a problem ('' when none): a patch that would change a neighbour outside the run,
    or an undo (undo_files: the files its revision puts back; None for a redeploy) of a neighbour's code."""
    near = colocated.get('neighbours') or []
    my_machine = (state.get('machine') or {})
    kept, denied = confirmed(me, my_machine, near, machines)
    shared = shared_environment(me, colocated.get('site_packages'), near, kept, play_hosts)
    # Another address with this machine's machine-id is reported, not refused: hosts cloned from one image share a
    # machine-id (the lab's containers do, and golden images often), so it proves no shared machine by itself.
    if undo_files is not None:
        problem = shared_undo_problem(me, colocated.get('site_packages'), near, kept, undo_files)
    else:
        problem = shared_patch_problem(me, shared) if patch_due else ''
    return {'neighbours': kept, 'neighbours_denied': denied, 'shared_environment': shared,
            'same_machine_id': unnamed_neighbours(me, my_machine, near, machines),
            'code_changed_while_running': bool(state.get('code_changed_since_start')), 'problem': problem}
