# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """How the modules that talk to the server find and send its API key."""

    DOCUMENTATION = r'''
options: {}
notes:
  - The requests to protected endpoints carry the server's API key as a bearer token (the C(Authorization) header), read on
    the host from the C(--config) YAML file named in the launch configuration (its C(api-key)), the way the
    C(gpuops.sglang.sglang) role hands the key to SGLang. The key never passes through this module's
    options or results. C(/health) is open in SGLang whatever its keys and is asked without one.
'''
