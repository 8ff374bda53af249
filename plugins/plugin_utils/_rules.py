# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the preflight refuses that the argument spec cannot say: ranges and relations between variables.

`settings` is the role's variables by name (rendered); `inventory` holds `pve_node`/`pve_vmid` when the
host defines them and the `proxmox` group, and `controller` (when known) what the controller runs with:
connect_timeout and retries of the connection, forks, the play's strategy, the hosts of the batch. One
message per broken rule, in a fixed order; a message never holds a key.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import system_folder_refusal
from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_float, as_int, as_text
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _timing

KEY_PATTERN = re.compile(r'^[!-~]*$')
SECRET_FLAGS = ('--api-key', '--admin-api-key', '--config')


ROLE_FOLDERS = (('sglang_config_dir', lambda settings: settings['sglang_config_dir']),
                ('sglang_run_dir', lambda settings: settings['sglang_run_dir']),
                ('sglang_log_file\'s folder', lambda settings: posixpath.dirname(as_text(settings['sglang_log_file']))))


def role_folders(settings: Any) -> list[str]:
    """The folders the role keeps the server's files in, each once, in ROLE_FOLDERS' order (the role makes the
    missing ones, 0750, and never chmods one it finds)."""
    folders = []
    for dummy, folder in ROLE_FOLDERS:
        path = as_text(folder(settings))
        if path not in folders:
            folders.append(path)
    return folders


def folder_refusal(path: str) -> str:
    """Why a folder the role makes and sets 0750 on cannot be `path` ("" when it can)."""
    path = as_text(path)
    if not posixpath.isabs(path):
        return 'is not an absolute path'
    # The one rule, shared with the host-side guard's folder (module_utils may not import plugin_utils).
    return system_folder_refusal(path)


def _folder_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    refusals = []
    for label, folder in ROLE_FOLDERS:
        why = folder_refusal(folder(settings))
        if why:
            refusals.append('%s %s %s' % (label, as_text(folder(settings)), why))
    return [('%s: the role keeps its files (launch configuration, keys, pid file, log) in folders of its own,'
             ' which it makes with mode 0750 when missing; use a dedicated subfolder, such as /etc/sglang,'
             ' /run/sglang or /var/log/sglang/server.log.'
             % '; '.join(refusals), bool(refusals))]


def secret_flag(arg: str) -> bool:
    """Whether an extra argument is, or abbreviates, a flag that carries a key.

    SGLang's parser (prepare_server_args in 0.5.12.post1 and 0.5.23) is a plain argparse.ArgumentParser,
    whose allow_abbrev defaults to True: it takes --api-ke KEY, or --admin=KEY, as the full flag. Any
    prefix of a secret flag is refused; an ambiguous one would fail SGLang's own parsing anyway.
    """
    name = as_text(arg).split('=', 1)[0]
    return len(name) > 2 and name.startswith('--') and any(flag.startswith(name) for flag in SECRET_FLAGS)


def adaptive(settings: Any) -> bool:
    """Whether the server runs upstream's --speculative-adaptive (the tiers file), not the patch's env switch."""
    return as_bool(settings['sglang_dynamic_spec_enabled']) and settings['sglang_dynamic_spec_mode'] == 'adaptive'


def adaptive_config(settings: dict[str, Any]) -> dict[str, Any]:
    """Upstream's batch-size tiers (sglang 0.5.23 adaptive_spec_params.py): string keys are batch sizes, each
    with candidate_steps; 0 steps means no drafting from that batch size on."""
    if settings['sglang_dynamic_spec_adaptive_config']:
        return settings['sglang_dynamic_spec_adaptive_config']
    steps = [1]
    if as_int(settings['sglang_speculative_num_steps']) != 1:
        steps.append(as_int(settings['sglang_speculative_num_steps']))
    return {'1': {'candidate_steps': steps},
            as_text(settings['sglang_dynamic_spec_batch_size_threshold']): {'candidate_steps': [0]}}


def candidate_steps(tiers: dict[str, Any]) -> list[int]:
    """Every tier's candidate steps together, as sglang 0.5.23's resolve_candidate_steps_from_config reads
    them (integer-string keys only)."""
    steps = set()
    for key, tier in tiers.items():
        if re.match('^[0-9]+$', as_text(key)) and isinstance(tier, dict) and 'candidate_steps' in tier:
            steps.update(as_int(step) for step in tier['candidate_steps'])
    return sorted(steps)


def _speculation_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    steps = as_int(settings['sglang_speculative_num_steps'])
    speculative = len(settings['sglang_speculative_algorithm']) > 0
    is_adaptive = adaptive(settings)
    tiers_steps = candidate_steps(adaptive_config(settings)) if is_adaptive else []
    return [
        ('sglang_draft_model_path is empty; EAGLE-3 needs the draft model.',
         speculative and len(settings['sglang_draft_model_path']) == 0),
        ('--speculative-adaptive supports only sglang_speculative_eagle_topk 1.',
         is_adaptive and as_int(settings['sglang_speculative_eagle_topk']) != 1),
        ('In adaptive mode SGLang (0.5.23) sets --speculative-num-draft-tokens to the draft steps + 1, and /server_info'
         ' would report that: set sglang_speculative_num_draft_tokens to %d.' % (steps + 1),
         is_adaptive and as_int(settings['sglang_speculative_num_draft_tokens']) != steps + 1),
        ('In adaptive mode SGLang (0.5.23) refuses to start unless sglang_speculative_num_steps (%s) is among the'
         ' candidate steps of its tiers (%s).'
         % (as_text(settings['sglang_speculative_num_steps']), ', '.join(str(step) for step in tiers_steps)),
         is_adaptive and steps not in tiers_steps),
    ]


def _inventory_problems(settings: dict[str, Any], inventory: dict[str, Any]) -> list[tuple[str, bool]]:
    patterns = settings['sglang_kill_patterns']
    return [
        ('pve_node and pve_vmid go together (the Proxmox node and the container VMID); set both or neither.',
         ('pve_vmid' in inventory) != ('pve_node' in inventory)),
        ('pve_node %s is not in the proxmox inventory group.' % as_text(inventory.get('pve_node', '')),
         'pve_node' in inventory and inventory['pve_node'] not in inventory.get('proxmox', [])),
        ('sglang_kill_patterns must list at least one pattern, and no empty one (an empty pattern matches every'
         ' process).', len(patterns) == 0 or '' in patterns),
    ]


def _timing_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    return [
        ('sglang_health_poll_interval must be above 0 seconds (0.25 polls four times a second).',
         as_float(settings['sglang_health_poll_interval']) <= 0),
        ('sglang_prefetch_timeout must be above 0 seconds (set sglang_prefetch false to turn the prefetch off).',
         as_float(settings['sglang_prefetch_timeout']) <= 0),
        ('sglang_health_timeout and sglang_gpu_release_timeout must be above 0, sglang_term_timeout not negative.',
         as_float(settings['sglang_health_timeout']) <= 0 or as_float(settings['sglang_gpu_release_timeout']) <= 0
         or as_float(settings['sglang_term_timeout']) < 0),
    ]


def _time_bound_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    """Every time variable within its maximum (_timing.TIME_BOUNDS); below its floor the other rules speak. A value
    that is not a number reads as 0 (Jinja's float); NaN and the infinities are never within a range."""
    problems = []
    for name, bound in _timing.TIME_BOUNDS.items():
        if bound.auto and _timing.is_auto(settings[name]):
            continue
        if not as_float(settings[name]) <= bound.most:
            problems.append(('%s (%s) must be %s: %s.' % (name, as_text(settings[name]), bound.words(), bound.why),
                             True))
    for name, count in _timing.COUNT_BOUNDS.items():
        message = '%s has %d entries; it must have %s: %s.' % (name, len(settings[name] or []), count.words(), count.why)
        problems.append((message, not count.holds(settings[name])))
    return problems


def _size_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    numbers = ('sglang_speculative_num_steps', 'sglang_speculative_eagle_topk', 'sglang_speculative_num_draft_tokens')
    return [
        ('sglang_max_running_requests and sglang_tp_size must be positive, sglang_port within 1 to 65535.',
         as_int(settings['sglang_max_running_requests']) <= 0 or as_int(settings['sglang_tp_size']) <= 0
         or not 1 <= as_int(settings['sglang_port']) <= 65535),
        ('sglang_speculative_num_steps, _eagle_topk and _num_draft_tokens must all be positive (SGLang wants all'
         ' three).', len(settings['sglang_speculative_algorithm']) > 0
         and any(as_int(settings[name]) <= 0 for name in numbers)),
    ]


def _fleet_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    return [
        ('sglang_drain_timeout, sglang_router_timeout and sglang_fleet_wait_timeout must not be negative,'
         ' sglang_ready_checks and sglang_max_unavailable not negative, sglang_max_fail_percentage within 0 to 100.',
         any(as_float(settings[name]) < 0
             for name in ('sglang_drain_timeout', 'sglang_router_timeout', 'sglang_fleet_wait_timeout'))
         or as_int(settings['sglang_ready_checks']) < 0 or as_int(settings['sglang_max_unavailable']) < 0
         or not 0 <= as_float(settings['sglang_max_fail_percentage']) <= 100),
    ]


def _key_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    keys = as_text(settings['sglang_api_key']) + as_text(settings['sglang_admin_api_key'])
    return [
        ('sglang_api_key and sglang_admin_api_key must be printable ASCII without spaces (they travel in an HTTP'
         ' header).', not KEY_PATTERN.match(keys)),
        ('sglang_extra_args must not carry --api-key, --admin-api-key or --config, nor an abbreviation of them'
         ' (every local user reads arguments in /proc/PID/cmdline): set sglang_api_key and sglang_admin_api_key, which the role hands over in a 0600'
         ' file.', any(secret_flag(arg) for arg in settings['sglang_extra_args'])),
        ('sglang_dynamic_spec_batch_size_threshold must be a positive batch size.',
         as_int(settings['sglang_dynamic_spec_batch_size_threshold']) <= 0),
    ]


def _perf_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    levels = [as_int(level) for level in settings['sglang_perf_levels'] or []]
    highest = max(levels or [1, 2 * as_int(settings['sglang_dynamic_spec_batch_size_threshold'])])
    return [
        ('sglang_perf_levels must be positive concurrencies, sglang_perf_requests at least the highest level (%d),'
         ' sglang_perf_max_new_tokens and sglang_perf_timeout positive.' % highest,
         any(level <= 0 for level in levels) or as_int(settings['sglang_perf_requests']) < highest
         or as_int(settings['sglang_perf_max_new_tokens']) <= 0 or as_float(settings['sglang_perf_timeout']) <= 0),
        ('sglang_perf_throughput_tolerance must be within 0 to 1, sglang_perf_itl_tolerance not negative'
         ' (fractions of the baseline).',
         not 0 <= as_float(settings['sglang_perf_throughput_tolerance']) < 1
         or as_float(settings['sglang_perf_itl_tolerance']) < 0),
        ('sglang_perf_baseline must be measure or stored; stored reads the last report in sglang_report_dir, which'
         ' is empty.', settings['sglang_perf_baseline'] not in ('measure', 'stored')
         or (settings['sglang_perf_baseline'] == 'stored' and len(settings['sglang_report_dir']) == 0)),
    ]


def _bake_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    """The canary bake's rules (only when it is on)."""
    bake = as_float(settings['sglang_canary_bake'])
    return [
        ('sglang_canary_bake (%s) must not be negative (0 turns the bake off).' % as_text(settings['sglang_canary_bake']),
         bake < 0),
        ('sglang_canary_bake needs sglang_router_url: the bake judges the canary on the live traffic a router sends'
         ' it, against the servers still on the previous version behind the same router.',
         bake > 0 and not as_text(settings['sglang_router_url'])),
        ('sglang_canary_bake needs a canary (redeploy_canary or sglang_canary of at least 1): the bake holds the'
         ' rollout after the canary batch.', bake > 0 and as_int(settings['sglang_canary']) < 1),
        ('sglang_canary_min_requests must be at least 1, sglang_canary_latency_tolerance at least 0, and'
         ' sglang_canary_error_tolerance from 0 to 1.',
         bake > 0 and (as_int(settings['sglang_canary_min_requests']) < 1
                       or as_float(settings['sglang_canary_latency_tolerance']) < 0
                       or not 0 <= as_float(settings['sglang_canary_error_tolerance']) <= 1)),
    ]


def _deadline_problems(settings: dict[str, Any]) -> list[Any]:
    budget = _timing.window_budget(settings)
    if _timing.is_auto(settings['sglang_rollback_deadline']):
        return []
    given = as_float(settings['sglang_rollback_deadline'])  # 0.0 when not a number
    if given <= 0:
        return [('sglang_rollback_deadline (%s) must be a number of seconds above 0, or auto (what the window may'
                 ' last with these settings).' % as_text(settings['sglang_rollback_deadline']), True)]
    return [
        ('sglang_rollback_deadline (%s s) is shorter than the outage window may last (%s s: 2 x sglang_term_timeout'
         ' + sglang_gpu_release_timeout + sglang_health_timeout%s); the guard would roll back a server that is still'
         ' loading.' % (as_text(settings['sglang_rollback_deadline']), as_text(budget),
                        (' + sglang_drain_timeout + 2 x sglang_router_timeout' if settings['sglang_router_url'] else '')
                        + (' + 2 x levels x sglang_perf_timeout' if as_bool(settings['sglang_perf_gate']) else '')
                        + (' + sglang_canary_bake and its /metrics readings'
                           if as_float(settings['sglang_canary_bake']) > 0 else '')),
         # A window longer than any deadline may be is window_problems' to say: no deadline could cover it.
         given < budget <= _timing.TIME_BOUNDS['sglang_rollback_deadline'].most),
    ]


def _revision_problems(settings: dict[str, Any]) -> list[tuple[str, bool]]:
    kept = as_int(settings['sglang_revisions_kept'])
    return [
        # Kept 1 keeps only the latest revision, the after-image of the run itself: nothing is left to undo to, and a
        # first recording (revisions 1 and 2) would keep revision 2 alone.
        ('sglang_revisions_kept (%s) must be 0 (none recorded) or at least 2: an undo puts back an earlier revision,'
         ' so 1 would record every run with nothing to undo to.' % as_text(settings['sglang_revisions_kept']),
         kept == 1 or kept < 0),
    ]


def window_problems(settings: dict[str, Any], group: dict[str, Any] | None, perf_levels: list[int]) -> list[Any]:
    """The window these settings make, and every hand-over of the lease in it (_timing.step_bounds), within the
    longest a guard may keep a host off its previous server (sglang_rollback_deadline's maximum, which the host
    refuses past too), naming the terms that made one long: each variable within its own range, their sum may not
    be (2000 perf levels of an hour, thousands of fleet servers read twice by a bake). [] while a variable is out of
    its own range: its own rule names it."""
    if [message for message, broken in _time_bound_problems(settings) if broken]:
        return []
    most = _timing.TIME_BOUNDS['sglang_rollback_deadline']
    problems = []
    for name, seconds, terms in _timing.long_bounds(settings, group, perf_levels):
        problems.append('%s lasts %g s (%.1f days), longer than a rollback guard may keep a host off its previous'
                        ' server (%g s, sglang_rollback_deadline\'s maximum: %s); %s. Shorten the longest of these.'
                        % (_timing.BOUND_WORDS.get(name, 'timing.' + name), seconds, seconds / _timing.DAY_S,
                           most.most, most.why,
                           'it adds up ' + ', '.join('%s: %g s' % term for term in terms) if terms
                           else 'it derives from variables each within its range'))
    return problems


def _lease_problems(settings: dict[str, Any], controller: dict[str, Any] | None) -> list[tuple[str, bool]]:
    controller = dict(_timing.CONTROLLER_DEFAULTS, **(controller or {}))
    idle, gap = as_float(settings['sglang_rollback_idle']), _timing.renewal_gap(controller)
    batch, forks = as_int(controller['batch']), controller['forks']
    return [
        ('sglang_rollback_idle (%s s) is shorter than what may pass on the controller between two renewals of the'
         ' guard (%s s: the connection timeout %s s x (1 + %s retries) + %s s to build and send the next module on a'
         ' loaded controller); the guard would roll back a run that is alive.'
         % (as_text(settings['sglang_rollback_idle']), as_text(gap), as_text(controller['connect_timeout']),
            as_text(controller['retries']), as_text(_timing.CONTROLLER_SLACK_S)), idle < gap),
        ('the batch has %s hosts but forks is %s under the free strategy: a host would wait for a fork as long as'
         ' another host waits for its server to load, which sglang_rollback_idle does not bound; raise forks'
         ' (-f) to the batch size or make the batches smaller (redeploy_serial).' % (batch, forks),
         controller['strategy'] == 'free' and forks is not None and batch > as_int(forks)),
    ]


# Who reads sglang_dynamic_spec_env_name in env mode (sglang_dynamic_spec_env_read_by): the patch's added lines, or
# the installed sglang by the operator's word. Upstream SGLang ignores the variable.
ENV_READERS = ('patch', 'installed')


def added_lines(patch_content: str | None) -> list[Any]:
    """The lines a unified diff adds (its `+` lines, the `+++` file headers left out), without the `+`."""
    return [line[1:] for line in as_text(patch_content or '').splitlines()
            if line.startswith('+') and not line.startswith('+++')]


def dynamic_spec_env_reader(settings: dict[str, Any], patch_content: str | None) -> str | None:
    """Who reads the dynamic speculation variable in env mode: 'patch' (an added line of the patch names it),
    'installed' (the operator says the installed sglang reads it), None when nothing does (the server would run
    with dynamic speculation silently off), "" when env mode is not on."""
    if not as_bool(settings['sglang_dynamic_spec_enabled']) or settings['sglang_dynamic_spec_mode'] != 'env':
        return ''
    if settings['sglang_dynamic_spec_env_read_by'] == 'installed':
        return 'installed'
    name = re.compile(r'(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])' % re.escape(as_text(settings['sglang_dynamic_spec_env_name'])))
    return 'patch' if any(name.search(line) for line in added_lines(patch_content)) else None


def dynamic_spec_env_problems(settings: dict[str, Any], patch_content: str | None) -> list[Any]:
    """The refusal of env mode that nothing reads, before anything stops (the patch is the plan's, read once)."""
    reader = dynamic_spec_env_reader(settings, patch_content)
    if settings['sglang_dynamic_spec_env_read_by'] not in ENV_READERS:
        return ['sglang_dynamic_spec_env_read_by (%s) must be patch or installed.'
                % as_text(settings['sglang_dynamic_spec_env_read_by'])]
    if reader is not None:
        return []
    found = ('sglang_patch_file %s adds no line naming it' % as_text(settings['sglang_patch_file'])
             if patch_content else 'sglang_patch_file is empty')
    return ['sglang_dynamic_spec_mode env sets %s on the server, but nothing is known to read it: %s, and upstream'
            ' SGLang ignores it, so dynamic speculation would be silently off while the report says healthy. Use a'
            ' patch whose added lines read it, or sglang_dynamic_spec_mode: adaptive (upstream\'s, sglang 0.5.23 or'
            ' later), or sglang_dynamic_spec_enabled: false; set sglang_dynamic_spec_env_read_by: installed only'
            ' when the installed sglang already reads it.' % (as_text(settings['sglang_dynamic_spec_env_name']), found)]


def variable_problems(settings: dict[str, Any], inventory: dict[str, Any]) -> list[Any]:
    """The messages of every broken rule, in the order the preflight has always said them."""
    rules = [('sglang_model_path is empty; set the model the server loads.', len(settings['sglang_model_path']) == 0)]
    rules += _speculation_problems(settings)
    rules += _inventory_problems(settings, inventory)
    rules += _timing_problems(settings) + _time_bound_problems(settings) + _size_problems(settings)
    rules += _fleet_problems(settings)
    rules += _key_problems(settings) + _folder_problems(settings) + _bake_problems(settings)
    rules += _deadline_problems(settings)
    rules += _lease_problems(settings, inventory.get('controller'))
    rules += _revision_problems(settings)
    if as_bool(settings['sglang_perf_gate']):
        rules += _perf_problems(settings)
    return [message for message, broken in rules if broken]
