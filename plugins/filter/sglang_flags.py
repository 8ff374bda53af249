# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

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


from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._flags import sglang_flags


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'sglang_flags': sglang_flags}
