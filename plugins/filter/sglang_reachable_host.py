# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: sglang_reachable_host
short_description: Where others reach a server, from the address it listens on
version_added: 0.3.0
description:
  - A server listening on every address (V(0.0.0.0), V(::) or empty) is reached at the host's inventory address;
    any other listening address is the one others reach.
  - The same rule the role applies to the fleet's peers (their URLs for the unavailability budget).
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: The address the server listens on (C(sglang_host)).
    type: str
    required: true
  inventory_address:
    description: The host's inventory address (C(ansible_host), else the inventory name).
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Build the URL the router knows the server by
  ansible.builtin.set_fact:
    worker_url: "http://{{ sglang_host | gpuops.sglang.sglang_reachable_host(ansible_host | default(inventory_hostname)) }}:30000"
'''

RETURN = r'''
_value:
  description: The address others reach the server at.
  type: str
'''

from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._rollout import reachable_host


def sglang_reachable_host(listen: str, inventory_address: str) -> str:
    return reachable_host(listen, inventory_address)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'sglang_reachable_host': sglang_reachable_host}
