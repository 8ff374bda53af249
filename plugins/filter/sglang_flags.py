# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: sglang_flags
short_description: The SGLang server's argv and the /server_info values it must report, from one table
version_added: 0.2.0
description:
  - Each server flag is defined once, in a table that yields both the command-line arguments and the value
    C(/server_info) reports for it, so the argv and the verification never drift apart.
  - Input is a dict of settings (the role passes its variables); output is a dict with V(args) (the argv after
    C(-m MODULE)) and V(expected) (the C(/server_info) keys and values).
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: >-
      Settings: model_path, draft_model_path, host, port, tp_size, nnodes, node_rank, dist_init_addr (the three
      of a server across several hosts; unset or null for one host), max_running_requests, speculative_algorithm,
      speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens, disable_overlap_schedule,
      adaptive (bool), adaptive_config_path, config_file (the 0600 YAML file of the API keys), extra_args.
    type: dict
    required: true
'''

EXAMPLES = r'''
- name: Build the server's arguments
  ansible.builtin.set_fact:
    server_flags: "{{ {'model_path': '/models/llama', 'port': 30000} | gpuops.sglang.sglang_flags }}"
'''

RETURN = r'''
_value:
  description: V(args), the argv after C(-m MODULE), and V(expected), the /server_info keys and values.
  type: dict
'''

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
)


def _convert(value, kind, setting):
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


def sglang_flags(settings):
    if not isinstance(settings, dict):
        raise AnsibleFilterError('sglang_flags expects a dict of settings, got %s' % type(settings).__name__)
    speculative = bool(settings.get('speculative_algorithm'))
    adaptive = bool(settings.get('adaptive'))
    args, expected = [], {}
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


class FilterModule(object):
    def filters(self):
        return {'sglang_flags': sglang_flags}
