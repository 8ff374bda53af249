# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's first step, on the controller: the rollout gate, the variable rules, the server's flags,
the files it renders, where the fleet's servers are reached, and the server's paths, in one task.

Reads the role's variables and the fleet's hostvars in Python (as ansible.posix's synchronize does)
instead of the expressions vars/main.yml used to hold; the decisions are the pure functions of
plugin_utils, unit-tested there.
"""

from __future__ import annotations

import hashlib
from collections import ChainMap
from typing import Any, Callable

from ansible import constants as C
from ansible import context
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _colocated, _configs, _groups, _performance, _rollout
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _rules
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _speculation, _timing
from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_float, as_text
from ansible_collections.gpuops.sglang.plugins.plugin_utils._flags import sglang_flags
from ansible_collections.gpuops.sglang.plugins.plugin_utils._variables import ROLE_SETTINGS, inventory_vars, rendered

TEMPLATES = ('sglang.service.j2', 'server_keys.yaml.j2')
# The role's files/launcher.py: sglang_server_info compares it with the installed one in the round trip that
# reads the server, and the role installs it only when that differs.
LAUNCHER = 'launcher.py'


def flag_settings(settings: Any, where: dict[str, Any], group: dict[str, Any] | None = None) -> dict[str, Any]:
    """sglang_flags' input (plugin_utils/_flags.py): every server flag is defined once, in its table. The group's
    three flags are None (left out) for a single-node server."""
    group = group or {}
    return {
        'model_path': settings['sglang_model_path'], 'host': settings['sglang_host'], 'port': settings['sglang_port'],
        'tp_size': settings['sglang_tp_size'], 'nnodes': group.get('nnodes'), 'node_rank': group.get('rank'),
        'dist_init_addr': group.get('dist_init_addr'), 'max_running_requests': settings['sglang_max_running_requests'],
        'speculative_algorithm': settings['sglang_speculative_algorithm'],
        'draft_model_path': settings['sglang_draft_model_path'],
        'speculative_num_steps': settings['sglang_speculative_num_steps'],
        'speculative_eagle_topk': settings['sglang_speculative_eagle_topk'],
        'speculative_num_draft_tokens': settings['sglang_speculative_num_draft_tokens'],
        'disable_overlap_schedule': settings['sglang_disable_overlap_schedule'],
        'adaptive': _rules.adaptive(settings), 'adaptive_config_path': where['adaptive_file'],
        'config_file': where['keys_file'] if _configs.keyed(settings) else None,
        'extra_args': settings['sglang_extra_args'],
        # Only when on: a server started with --enable-metrics in sglang_extra_args is not expected without it.
        'enable_metrics': True if (as_bool(settings['sglang_enable_metrics'])
                                   or as_float(settings['sglang_canary_bake']) > 0) else None,
        # None (unset) leaves each out: SGLang's own default, and no check of it after the start.
        'weight_loader_prefetch_checkpoints': settings['sglang_weight_loader_prefetch_checkpoints'],
        'weight_loader_prefetch_num_threads': settings['sglang_weight_loader_prefetch_num_threads'],
        # "" (the default: the argument spec's choices cannot hold null) is unset too.
        'startup_weight_load_mode': settings['sglang_startup_weight_load_mode'] or None,
    }


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # A server that owns some GPUs, or shares its machine, has the machine read (sglang_server_info) before its launch
    # is rendered: the launch names its GPUs by the UUIDs found there.
    _requires_connection = True

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=dict(
            gate_only=dict(type='bool', default=False),
            tune_mode=dict(type='dict'),
        ))
        settings = rendered(self._templar, task_vars, ROLE_SETTINGS)
        if args['tune_mode'] is not None:
            overridden = _speculation.overridden(args['tune_mode'], settings)
            if overridden:
                result.update(failed=True, msg=overridden)
                return result
        canary = self._canary(settings, task_vars)
        result.update(changed=False, left_alone_because=self._gate(settings, task_vars, canary))
        if args['gate_only']:
            return result
        where = _configs.paths(settings)
        peers = _rollout.peer_urls(settings['sglang_fleet_hosts'], inventory_vars(task_vars))
        group, group_problems = _groups.plan_group(
            as_text(settings['sglang_server_group']), task_vars['inventory_hostname'], settings['sglang_fleet_hosts'],
            self._group_vars(settings, task_vars), settings['sglang_dist_init_addr'],
            settings['sglang_dist_init_port'], settings['sglang_tp_size'], peers)
        if group is not None and group['rank'] > 0:
            # Only rank 0 serves HTTP: a rank > 0 is managed and checked by its process alone.
            where['base_url'] = ''
        group_problems.extend(_groups.play_problems(group, task_vars.get('ansible_play_hosts_all') or []))
        perf_levels = _performance.levels_to_measure(settings['sglang_perf_levels'],
                                                     settings['sglang_dynamic_spec_batch_size_threshold'])
        # The group is known even on a node left alone, so the play still sees which server it belongs to.
        result.update(paths=where, adaptive=_rules.adaptive(settings), problems=[], group=group,
                      slot_key=group['key'] if group else task_vars['inventory_hostname'],
                      timing=_timing.step_bounds(settings, group, perf_levels),
                      bake=self._bake(settings, task_vars, canary, peers), tune=self._tune(settings))
        if result['left_alone_because']:
            return result
        patch, patch_problem = self._patch(as_text(settings['sglang_patch_file']))
        problems = _rules.variable_problems(settings, self._inventory(task_vars)) + group_problems + patch_problem
        # The window as this host's rank sees it: the hand-overs of a rank > 0 grow with what rank 0 does meanwhile.
        problems += _rules.window_problems(settings, group, perf_levels)
        if not patch_problem:
            # An unreadable patch is refused for that alone; its lines cannot be read for the variable.
            problems += _rules.dynamic_spec_env_problems(settings, (patch or {}).get('content'))
        me, near = self._neighbours(settings, task_vars)
        problems += (_colocated.gpus_problems(settings['sglang_gpus']) + _colocated.environment_problems(settings)
                     + _colocated.conflicts(me, near))
        colocated = self._colocated(me, near, task_vars, where, problems)
        problems += colocated.pop('problems')
        if problems:
            result.update(failed=True, problems=problems, msg=' '.join(problems))
            return result
        flags = sglang_flags(flag_settings(settings, where, group))
        gpu_environment = _colocated.gpu_environment(colocated['gpu_uuids'])
        files = _configs.configs(settings, flags['args'], self._templates(), gpu_environment)
        result.update(
            args=flags['args'], expected_server_info=flags['expected'],
            # The GPUs are checked like the patch's switch: where the server reports its environment.
            expected_environment=(dict(_configs.dynamic_environment(settings), **gpu_environment)
                                  if as_bool(settings['sglang_verify_environment']) else {}),
            colocated=colocated,
            # The launch configuration carries the secret environment, the API keys file the keys.
            secret=bool(settings['sglang_secret_environment']) or _configs.keyed(settings),
            secret_files=_configs.secret_labels(settings),
            configs=[{key: entry[key] for key in ('label', 'path', 'content', 'systemd_only')}
                     for entry in files],
            contents={entry['label']: entry['content'] for entry in files},
            files=[{key: value for key, value in entry.items() if key != 'content'} for entry in files],
            peers=peers, perf_levels=perf_levels, patch=patch,
            dynamic_spec_env_read_by=_rules.dynamic_spec_env_reader(settings, (patch or {}).get('content')),
            launcher={'path': where['launcher'], 'content': self._role_file('files', LAUNCHER)},
        )
        # The rendered files hold the keys or the secret environment: Ansible censors this result wherever it
        # would show it. A refused plan (above) carries no file, so its messages are always shown.
        result['_ansible_no_log'] = result['secret']
        return result

    def _neighbours(self, settings: dict[str, Any], task_vars: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
        """This server, and the fleet's and the play's servers that share its machine or its GPUs by the inventory
        (their variables through hostvars, else the role's defaults: a neighbour need not be in the play)."""
        peer, name = inventory_vars(task_vars), task_vars['inventory_hostname']
        defaults = self._role_defaults()

        def record(host: str, own: dict[str, Any]) -> dict[str, Any]:
            found = peer(host)
            values = {key: own[key] if key in own else found.get(key, defaults.get(key))
                      for key in _colocated.NEIGHBOUR_SETTINGS}
            values.update((key, found.get(key)) for key in _colocated.PLACEMENT)
            return _colocated.server_record(host, values)
        me = record(name, settings)
        hosts = [host for host in list(settings['sglang_fleet_hosts'] or []) + list(task_vars.get('ansible_play_hosts_all') or [])
                 if host != name]
        others = [record(host, {}) for host in dict.fromkeys(hosts)]
        return me, _colocated.neighbours(me, others)

    def _colocated(self, me: dict[str, Any], near: list[Any], task_vars: dict[str, Any], where: dict[str, Any],
                   problems: list[str]) -> dict[str, Any]:
        """{neighbours, machine, gpu_uuids, problems}: what the machine says (read on it, when this server owns some
        GPUs or shares the machine; never for a plan already refused) and what it refuses."""
        play = task_vars.get('ansible_play_hosts_all') or []
        found = {'neighbours': [{'name': other['name'], 'same_machine': other['same_machine'], 'in_run': other['name'] in play,
                                 'gpus': other['gpus']} for other in near],
                 'gpus': me['gpus'], 'machine': None, 'site_packages': None, 'gpu_uuids': [], 'problems': [],
                 # How the stop, the container kill and the guard tell the neighbours' processes from this server's.
                 'neighbour_marks': _colocated.marks(near)}
        if problems or not (me['gpus'] or any(other['same_machine'] for other in near)):
            return found
        machine = self._execute_module(module_name='gpuops.sglang.sglang_server_info', task_vars=task_vars, module_args={
            'machine_only': True, 'launch_file': where['launch_file'], 'pidfile': where['pidfile'], 'url': '',
            'python': me['python'], 'gpus': me['gpus'],
            # Another container's interpreter is not on this one's disk: only the GPUs are shared there.
            'neighbours': [{'name': other['name'], 'python': other['python'] if other['same_machine'] else '',
                            'gpus': other['gpus']} for other in near]})
        if machine.get('failed'):
            found['problems'].append('the machine of %s could not be read: %s' % (me['name'], machine.get('msg')))
            return found
        found.update(machine=machine['machine'], site_packages=machine['machine']['site_packages'])
        found['problems'] = _colocated.gpu_problems(me, near, machine['machine'])
        found['gpu_uuids'] = _colocated.resolve(me['gpus'], machine['machine']['gpus'])[0]
        sites = {entry['name']: entry['site_packages'] for entry in machine['machine']['site_packages_of']}
        for entry in found['neighbours']:
            entry['site_packages'] = sites.get(entry['name'])
        return found

    def _role_defaults(self) -> dict[str, Any]:
        """The role's defaults/main.yml, for a neighbour's variables that its inventory does not set."""
        try:
            return self._loader.load_from_file(self._find_needle('defaults', 'main.yml')) or {}
        except (AnsibleError, OSError) as exc:
            raise AnsibleActionFail('cannot read the role\'s defaults/main.yml: %s' % to_text(exc))

    @staticmethod
    def _group_vars(settings: dict[str, Any], task_vars: dict[str, Any]) -> Callable:
        """The fleet's variables as _groups reads them: this host's own group and rank rendered (a template or
        an -e value), the others' through hostvars."""
        peer, me = inventory_vars(task_vars), task_vars['inventory_hostname']
        mine = {'sglang_server_group': settings['sglang_server_group'], 'sglang_node_rank': settings['sglang_node_rank']}
        return lambda name: ChainMap(mine, peer(name)) if name == me else peer(name)

    def _canary(self, settings: dict[str, Any], task_vars: dict[str, Any]) -> list[Any]:
        """The canary's hosts: the rollout's first servers, across the single-node and the group play (the plays
        name the whole rollout, sglang_server_batches' rollout_hosts; one play alone is its own rollout)."""
        rollout = rendered(self._templar, task_vars, ['sglang_rollout_hosts'], {'sglang_rollout_hosts': None})
        return _rollout.canary_hosts(rollout['sglang_rollout_hosts'] or task_vars.get('ansible_play_hosts_all', []),
                                     settings['sglang_canary'], inventory_vars(task_vars))

    def _gate(self, settings: dict[str, Any], task_vars: dict[str, Any], canary: list[Any]) -> str:
        """Why this host is left alone (its skip flag, a failed canary, the failure budget); "" to go on."""
        peer = inventory_vars(task_vars)
        reports = _rollout.peer_reports(settings['sglang_fleet_hosts'], task_vars['inventory_hostname'],
                                        lambda name: peer(name).get('sglang_redeploy_report'), peer)
        return _rollout.gate(settings['sglang_redeploy_skip'], reports, canary, settings['sglang_max_fail_percentage'])

    @staticmethod
    def _tune(settings: dict[str, Any]) -> dict[str, Any]:
        """{modes, deadline, problems} of a speculation tuning run (playbooks/tune_speculation.yml) on this host."""
        modes = [dict(mode, settings=_speculation.mode_settings(mode, settings)) for mode in
                 _speculation.modes(settings['sglang_speculative_num_steps'], settings['sglang_tune_steps'] or [])]
        return {'modes': modes, 'deadline': _timing.tune_budget(settings, modes),
                'problems': _speculation.problems(settings)}

    @staticmethod
    def _bake(settings: dict[str, Any], task_vars: dict[str, Any], canary: list[Any],
              peers: dict[str, str]) -> dict[str, Any]:
        """{seconds, baselines}: a canary server bakes against the fleet's other servers; any other host does not
        (seconds 0), nor any host without sglang_canary_bake."""
        seconds = as_float(settings['sglang_canary_bake'])
        if seconds <= 0 or task_vars['inventory_hostname'] not in canary:
            return {'seconds': 0, 'baselines': {}}
        return {'seconds': seconds, 'baselines': _rollout.bake_baselines(
            settings['sglang_fleet_hosts'], canary, peers, inventory_vars(task_vars))}

    def _inventory(self, task_vars: dict[str, Any]) -> dict[str, Any]:
        inventory = {name: self._templar.template(task_vars[name])
                     for name in ('pve_node', 'pve_vmid') if name in task_vars}
        inventory['proxmox'] = (task_vars.get('groups') or {}).get('proxmox', [])
        inventory['controller'] = self._controller(task_vars)
        return inventory

    def _controller(self, task_vars: dict[str, Any]) -> dict[str, Any]:
        """What bounds the controller's gap between two steps of a host: the connection's timeout and
        retries, forks, the play's strategy and the hosts of this batch."""
        try:
            retries = self._connection.get_option('reconnection_retries')
        except (AnsibleError, KeyError, AttributeError):
            # Not the ssh connection (local, podman): no retries of its own.
            retries = 0
        play = self._task.get_play()
        return {
            'connect_timeout': self._play_context.timeout or C.DEFAULT_TIMEOUT, 'retries': retries or 0,
            'forks': context.CLIARGS.get('forks') or C.DEFAULT_FORKS,
            'strategy': (play.strategy if play is not None else None) or C.DEFAULT_STRATEGY,
            'batch': len(task_vars.get('ansible_play_batch') or [task_vars.get('inventory_hostname')]),
        }

    def _patch(self, name: str) -> tuple[dict[str, str] | None | None, list[Any]]:
        """The patch, read once on the controller where lookup('file') finds it (the role's and the play's files/
        folders, or a path): the dry run, the stamp and the apply then use the same bytes, even if the file is
        edited during the run. (None, []) without a patch; (None, [problem]) when it cannot be read."""
        if not name:
            return None, []
        try:
            path = self._find_needle('files', name)
            with open(path, 'rb') as handle:
                data = handle.read()
            content = data.decode('utf-8')  # the module takes text: a patch that is not UTF-8 is refused here
        except (AnsibleError, OSError, UnicodeError) as exc:
            return None, ['sglang_patch_file %s cannot be read on the controller: %s' % (name, to_text(exc))]
        return {'file': name, 'content': content, 'sha256': hashlib.sha256(data).hexdigest()}, []

    def _templates(self) -> dict[str, str]:
        return {name: self._role_file('templates', name) for name in TEMPLATES}

    def _role_file(self, kind: str, name: str) -> str:
        """The text of one of the role's templates/ or files/."""
        try:
            with open(self._find_needle(kind, name), 'rb') as handle:
                return to_text(handle.read())
        except (AnsibleActionFail, OSError) as exc:
            raise AnsibleActionFail('cannot read the role %s %s: %s' % (kind.rstrip('s'), name, to_text(exc)))
