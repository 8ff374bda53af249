# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The attributes every gpuops.sglang module has; a module adds C(support) and C(details).

    The same split as community.general's and community.docker's C(attributes) fragments: the
    general meaning of each attribute is written once here, what it means for one module lives in
    that module's C(details).
    """

    DOCUMENTATION = r'''
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
  action_group:
    description: Use C(group/gpuops.sglang.sglang) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - gpuops.sglang.sglang
'''

    # The role's decisions, computed on the controller (sglang_plan, sglang_decision): one text for both.
    CONTROLLER_DECISION = r'''
options: {}
attributes:
  check_mode:
    support: full
    details: Reads and computes only.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
    details: Runs on the controller (an action plugin); nothing runs on the managed host.
'''
