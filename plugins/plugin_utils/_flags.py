# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SGLang server's flags, each defined once: one table yields the argv and the /server_info values it reports.

The sglang_flags filter and the sglang_plan action both build the server's argv from it (an action plugin never
imports a filter plugin):

    sglang_flags(settings) -> {args: the argv after `-m MODULE`, expected: the /server_info keys and values}
"""

from __future__ import annotations


from typing import Any

from ansible.errors import AnsibleFilterError

SPECULATIVE = 'speculative'

# (setting, flag, /server_info key, kind, group). kind: str/int take a value, bool is a bare switch.
# group None: always; 'speculative': only with a speculative algorithm; 'adaptive': with adaptive mode.
FLAGS = (
    ('model_path', '--model-path', 'model_path', 'str', None),
    ('host', '--host', None, 'str', None),
    ('port', '--port', 'port', 'int', None),
    ('tp_size', '--tp-size', 'tp_size', 'int', None),
    # A server across several hosts (a server group): unset (None) for a single-node server. tp_size is the
    # group's total; every node names the same rank 0 address and its own rank.
    ('nnodes', '--nnodes', 'nnodes', 'int', None),
    ('node_rank', '--node-rank', 'node_rank', 'int', None),
    ('dist_init_addr', '--dist-init-addr', 'dist_init_addr', 'str', None),
    # With speculation on and this unset, SGLang silently caps running requests at 48.
    ('max_running_requests', '--max-running-requests', 'max_running_requests', 'int', None),
    ('speculative_algorithm', '--speculative-algorithm', 'speculative_algorithm', 'str', SPECULATIVE),
    ('draft_model_path', '--speculative-draft-model-path', 'speculative_draft_model_path', 'str', SPECULATIVE),
    # SGLang wants these three together or none of them.
    ('speculative_num_steps', '--speculative-num-steps', 'speculative_num_steps', 'int', SPECULATIVE),
    ('speculative_eagle_topk', '--speculative-eagle-topk', 'speculative_eagle_topk', 'int', SPECULATIVE),
    ('speculative_num_draft_tokens', '--speculative-num-draft-tokens', 'speculative_num_draft_tokens', 'int',
     SPECULATIVE),
    ('disable_overlap_schedule', '--disable-overlap-schedule', 'disable_overlap_schedule', 'bool', None),
    # Prometheus /metrics (the canary bake reads them); None leaves the flag and its check out.
    ('enable_metrics', '--enable-metrics', 'enable_metrics', 'bool', None),
    ('adaptive', '--speculative-adaptive', 'speculative_adaptive', 'bool', 'adaptive'),
    ('adaptive_config_path', '--speculative-adaptive-config', None, 'str', 'adaptive'),
    # The API keys, in a file: as arguments they would be readable by every local user in /proc/PID/cmdline.
    ('config_file', '--config', None, 'str', None),
    # SGLang's own loading options (issue 45), None (the role's default) leaving the flag and its check out.
    # 0.5.12.post1 and 0.5.23 have the first two; --startup-weight-load-mode is 0.5.23's (an older parser exits 2).
    ('weight_loader_prefetch_checkpoints', '--weight-loader-prefetch-checkpoints', 'weight_loader_prefetch_checkpoints',
     'bool', None),
    ('weight_loader_prefetch_num_threads', '--weight-loader-prefetch-num-threads', 'weight_loader_prefetch_num_threads',
     'int', None),
    ('startup_weight_load_mode', '--startup-weight-load-mode', 'startup_weight_load_mode', 'str', None),
)


def _convert(value: Any, kind: str, setting: str) -> int | bool | str:
    try:
        if kind == 'int':
            return int(value)
        if kind == 'bool':
            if isinstance(value, str):
                return value.strip().lower() in ('1', 'true', 'yes', 'on')
            return bool(value)
        return str(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError('sglang_flags: %s must be %s, got %r' % (setting, kind, value))


def sglang_flags(settings: dict[str, Any]) -> dict[str, Any]:
    """{args, expected} of the settings (model_path, port, ..., extra_args); AnsibleFilterError names a bad one."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError('sglang_flags expects a dict of settings, got %s' % type(settings).__name__)
    speculative = bool(settings.get('speculative_algorithm'))
    adaptive = bool(settings.get('adaptive'))
    args: list[str] = []
    expected: dict[str, int | bool | str] = {}
    for setting, flag, info_key, kind, group in FLAGS:
        if (group == SPECULATIVE and not speculative) or (group == 'adaptive' and not adaptive):
            continue
        if setting not in settings or settings[setting] is None:
            continue
        value = _convert(settings[setting], kind, setting)
        if kind == 'bool':
            if value:
                args.append(flag)
        else:
            args.extend([flag, str(value)])
        if info_key:
            expected[info_key] = value
    extra = settings.get('extra_args') or []
    if not isinstance(extra, list):
        raise AnsibleFilterError('sglang_flags: extra_args must be a list, one argument per item')
    args.extend(str(arg) for arg in extra)
    return {'args': args, 'expected': expected}
