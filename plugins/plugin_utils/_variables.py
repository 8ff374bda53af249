# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's variables as an action plugin reads them: by name from the task variables, rendered."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleActionFail

if TYPE_CHECKING:
    from ansible.template import Templar

# Every role variable the plan reads (roles/sglang/defaults/main.yml, meta/argument_specs.yml; test_variables holds
# each to both files, test_sglang_plan_flags each launch flag's to the flags table). A list, not every option of
# argument_specs.yml: the plan renders each setting it is given, every run, and some options are the tasks' alone
# (pve_node and pve_vmid are tested with `is defined`, sglang_router_worker_url renders through vars/main.yml).
ROLE_SETTINGS = (
    'sglang_admin_api_key', 'sglang_api_key', 'sglang_cache_dir', 'sglang_canary', 'sglang_canary_bake',
    'sglang_canary_error_tolerance', 'sglang_canary_latency_tolerance', 'sglang_canary_min_requests', 'sglang_config_dir',
    'sglang_disable_overlap_schedule', 'sglang_dist_init_addr', 'sglang_dist_init_port', 'sglang_draft_model_path',
    'sglang_drain_timeout', 'sglang_dynamic_spec_adaptive_config', 'sglang_enable_metrics', 'sglang_dynamic_spec_batch_size_threshold',
    'sglang_dynamic_spec_enabled', 'sglang_dynamic_spec_env_name', 'sglang_dynamic_spec_env_read_by',
    'sglang_dynamic_spec_mode', 'sglang_environment',
    'sglang_extra_args', 'sglang_fleet_hosts', 'sglang_fleet_wait_timeout', 'sglang_gpu_driver_info', 'sglang_gpu_release_timeout', 'sglang_gpus',
    'sglang_guard_dir', 'sglang_health_poll_interval', 'sglang_health_timeout', 'sglang_host',
    'sglang_kill_patterns', 'sglang_launch_module', 'sglang_log_file', 'sglang_max_fail_percentage',
    'sglang_max_running_requests', 'sglang_max_unavailable', 'sglang_model_path', 'sglang_node_rank',
    'sglang_patch_file', 'sglang_perf_baseline', 'sglang_perf_gate', 'sglang_perf_itl_tolerance', 'sglang_perf_levels',
    'sglang_perf_max_new_tokens', 'sglang_perf_requests', 'sglang_perf_throughput_tolerance', 'sglang_perf_timeout',
    'sglang_port', 'sglang_prefetch_timeout', 'sglang_python', 'sglang_ready_checks', 'sglang_redeploy_skip', 'sglang_report_dir',
    'sglang_revisions_kept', 'sglang_rollback_deadline', 'sglang_rollback_idle', 'sglang_router_timeout', 'sglang_router_url',
    'sglang_run_dir', 'sglang_secret_environment', 'sglang_server_group', 'sglang_service_name',
    'sglang_speculative_algorithm', 'sglang_speculative_eagle_topk', 'sglang_speculative_num_draft_tokens',
    'sglang_speculative_num_steps', 'sglang_term_timeout', 'sglang_tp_size', 'sglang_tune_levels',
    'sglang_tune_max_new_tokens', 'sglang_tune_requests', 'sglang_tune_steps', 'sglang_tune_timeout',
    'sglang_user', 'sglang_group', 'sglang_verify_environment',
    'sglang_startup_weight_load_mode', 'sglang_weight_loader_prefetch_checkpoints', 'sglang_weight_loader_prefetch_num_threads',
)
# sglang_model_path has no default: the argument spec requires it; the rules say so in their words.
# sglang_node_rank has none either: a node of a server group must name its rank (_groups refuses it unset).
OPTIONAL = {'sglang_model_path': '', 'sglang_node_rank': None}


def rendered(templar: Templar, task_vars: dict[str, Any], names: Iterable[str],
             optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """{name: value} of `names`, each rendered as a task argument would be."""
    optional = OPTIONAL if optional is None else optional
    values = {}
    for name in names:
        if name in task_vars:
            values[name] = templar.template(task_vars[name])
        elif name in optional:
            values[name] = optional[name]
        else:
            raise AnsibleActionFail('the role variable %s is not defined' % name)
    return values


def inventory_vars(task_vars: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    """`inventory_vars(name)`: a host's variables through hostvars ({} for a host Ansible does not know), as the
    plugin_utils functions read the fleet."""
    hostvars = task_vars.get('hostvars') or {}
    return lambda name: hostvars.get(name) or {}


def registered_of(task_vars: dict[str, Any], hosts: Iterable[str],
                  names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{host: {name: its registered result, None where undefined}} of `hosts`, through hostvars."""
    peer = inventory_vars(task_vars)
    return {host: {name: peer(host).get(name) for name in names} for host in hosts}
