# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The wait for a server whose stop did not wait (gpu_release, pct_exec_kill)."""

    DOCUMENTATION = r'''
options:
  await_exit:
    description:
      - PIDs of processes already told to stop by an earlier step, as M(gpuops.sglang.sglang_server) returns
        them in C(stopping) with C(wait=false). Before anything is looked for or signalled, the module
        waits up to O(term_timeout) seconds for them to exit on their own, so the server's drain is not
        cut short while the drain overlaps this module's start-up. What is still running then gets SIGKILL
        at once (it had its SIGTERM and its O(term_timeout), as a stop that waits gives it) and is listed
        first in RV(killed); the module then goes on as usual.
      - Processes are followed by PID and start time as first listed; a PID not running then is not
        waited on. RV(awaited) says how long the wait took and what was still running.
      - Not waited on in check mode (RV(awaited) then names nothing).
    type: list
    elements: int
    default: []
'''
