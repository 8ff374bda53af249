#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: sglang_decision
short_description: Decide whether the sglang role redeploys a host's server, from what it gathered
version_added: 0.3.0
description:
  - A step of the C(gpuops.sglang.sglang) role, after C(sglang_plan), C(sglang_server_info) and the patch's dry
    run. Reads their registered results (C(_sglang_plan), C(_sglang_state), C(_sglang_patch_check)) from the
    task's variables.
  - Fails, saying what to do, when the server's interpreter does not exist or, in adaptive mode, when its sglang
    would ignore batch-size tiers.
  - Returns why the server is redeployed (RV(reasons)), the patch as the window and the report see it, and which
    configuration files the window writes and the guard saves.
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.attributes.controller_decision
options: {}
notes:
  - Meant for the role's own tasks.
'''

EXAMPLES = r'''
- name: Decide whether the server must be redeployed
  gpuops.sglang.sglang_decision:
  register: _sglang_decision
'''

RETURN = r'''
reasons:
  description: Why the server is redeployed (force_restart, patch not applied, a file changed, not running, ...).
  returned: success
  type: list
  elements: str
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
