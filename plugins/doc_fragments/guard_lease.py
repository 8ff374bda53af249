# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The lease of the rollback guard, renewed by each step of the outage window."""

    DOCUMENTATION = r'''
options:
  guard:
    description:
      - The rollback guard this step renews (M(gpuops.sglang.sglang_guard) armed with C(idle)), at its start,
        with a horizon covering the step's own bounded work, while it waits, on every poll (at most every
        2 s), and when it ends.
      - The horizon holds only while the step's process runs; once it is gone (finished, or killed with its
        ssh session), the guard restores when nothing renewed it for its idle bound.
      - When the guard is not armed by O(guard.run_id) any more (it restored, or another run took it over),
        or was armed before the host's last boot (its lease lapsed with the reboot), the step fails before it
        changes anything, and while it waits, at the next renewal.
      - Once the step's controller is gone (the pipe or socket its result goes to, its stdout, lost its reader, as
        when ansible-playbook is killed or its connection lost), no renewal goes through and the step fails at the
        next one, so the idle bound counts from its last renewal. Where stdout is a file or a terminal (an async
        task, a run by hand) this cannot be told, and the step renews as asked.
      - The horizon and the idle bound count on the host's boot clock, which NTP or C(date -s) never steps.
      - Unset, nothing is renewed.
    type: dict
    suboptions:
      folder:
        description: The guard's folder on the host.
        type: path
        required: true
      run_id:
        description: The run that armed the guard.
        type: str
        required: true
      after:
        description:
          - Seconds the step after this one may take without renewing the lease (it runs elsewhere, such as the
            container kill on the Proxmox node or the router's admission). The last renewal of this step adds them.
          - A renewal that would hold the host longer than 172800 s (two days, the guard's deadline maximum), this
            O(guard.after) or the step's own bound, NaN included, is refused and the step fails before it acts.
        type: float
        default: 0
'''
