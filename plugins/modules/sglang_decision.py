#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_decision
short_description: (internal to the sglang role) Decide whether the sglang role redeploys a host's server, from what it gathered
version_added: 0.3.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - A step of the C(gpuops.sglang.sglang) role, after C(sglang_plan), C(sglang_server_info) and the patch's dry
    run, whose results it takes as its options.
  - Fails, saying what to do, when the server's interpreter does not exist, when a folder of the server's files
    is one another user could write into (C(sglang_server_info)'s C(folders_untrusted), for instance a log folder
    under a group-writable C(/var/log)), or, in adaptive mode, when its sglang would ignore batch-size tiers.
  - Returns why the server is redeployed (RV(reasons)), the patch as the window and the report see it, and which
    configuration files the window writes and the guard saves.
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.controller_decision
options:
  adaptive:
    description: Whether the server runs adaptive speculation (C(gpuops.sglang.sglang_plan)'s C(adaptive)).
    type: bool
    required: true
  files:
    description:
      - The server's configuration files as C(gpuops.sglang.sglang_plan) lists them (C(files), without their
        content).
    type: list
    elements: dict
    required: true
  state:
    description: The result of C(gpuops.sglang.sglang_server_info) on this host, with O(gpuops.sglang.sglang_server_info#module:configs).
    type: dict
    required: true
  patch_check:
    description:
      - The result of C(gpuops.sglang.sglang_patch) in check mode (the dry run); a skipped task's result, or
        nothing, when the patch's stamp proved it applied or there is no patch.
    type: dict
    default: {}
  force_restart:
    description: Redeploy even when nothing changed.
    type: bool
    default: false
  patch_file:
    description: The patch the run applies (the role's C(sglang_patch_file)); empty for none.
    type: str
    default: ''
  python:
    description: The server's interpreter, named in the refusal when it does not exist.
    type: str
    required: true
  host:
    description: The host, named in the refusals.
    type: str
    required: true
  router_url:
    description:
      - The router the server sits behind (the role's C(sglang_router_url)); empty for none. A readmission the
        guard owes for this router (O(state)'s C(guard_router_owed)) is a reason to redeploy, so that the server
        is verified and put back.
    type: str
    default: ''
notes:
  - Meant for the role's own tasks.
'''

EXAMPLES = r'''
- name: Decide whether the server must be redeployed
  gpuops.sglang.sglang_decision:
    adaptive: "{{ _sglang_plan.adaptive }}"
    files: "{{ _sglang_plan.files }}"
    state: "{{ _sglang_state }}"
    patch_check: "{{ _sglang_patch_check }}"
    force_restart: "{{ sglang_force_restart }}"
    patch_file: "{{ sglang_patch_file }}"
    python: "{{ sglang_python }}"
    host: "{{ inventory_hostname }}"
    router_url: "{{ sglang_router_url }}"
  register: _sglang_decision
'''

RETURN = r'''
reasons:
  description: Why the server is redeployed (force_restart, patch not applied, a file changed, not running, ...).
  returned: success
  type: list
  elements: str
readmission_owed:
  description:
    - The guard's record of a restore that left the server out of O(router_url) (its run id, when, why), or null.
      The run then treats the server as one the router listed before it (out, verified, back in).
  returned: success
  type: dict
redeploy_needed:
  description: Whether there is a reason.
  returned: success
  type: bool
manager:
  description: How the server is managed (systemd or detached).
  returned: success
  type: str
changed_configs:
  description: Labels of the rendered files that differ from the live ones.
  returned: success
  type: list
  elements: str
writes:
  description: The changed files, without their content.
  returned: success
  type: list
  elements: dict
  contains:
    label:
      description: The file's name in the report.
      type: str
    mode:
      description: The file's mode.
      type: str
    candidate:
      description: Where the window writes the new file.
      type: str
    live:
      description: Where it is moved once the server is stopped.
      type: str
pairs:
  description: Every file the server runs from (the speculation tuner writes each mode's whole configuration).
  returned: success
  type: list
  elements: dict
  contains:
    label:
      description: The file's name in the report.
      type: str
    mode:
      description: The file's mode.
      type: str
    candidate:
      description: Where a new file is written first.
      type: str
    live:
      description: Where the server reads it.
      type: str
guard_files:
  description: What the guard saves before the stop (every live configuration file and every patched file).
  returned: success
  type: list
  elements: str
patch_state:
  description: The patch from its stamp, or the dry run's result.
  returned: success
  type: dict
patch_due:
  description: Whether the window applies the patch.
  returned: success
  type: bool
'''
