#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_report
short_description: (internal to the sglang role) Write a host's redeploy report on the controller and into the run's artifacts
version_added: 0.2.0
description:
  - Internal to the C(gpuops.sglang.sglang) role, called by its tasks, not by users; its options are the
    role's to give and may change in any release.
  - Without O(report), builds the report of the C(gpuops.sglang.sglang) role's run from its step results (O(run))
    and settings (O(settings)), the final one or, with O(stage=opened), the one a run cut off in its outage window
    leaves.
  - Writes the report as JSON to O(report_dir)/<host>.json on the controller (and to <host>.last-redeploy.json
    when its C(status) is V(redeployed)), atomically, and publishes it in the run's custom stats under
    C(sglang_redeploy), keyed by host, which ansible-runner saves as the job's artifacts (what AWX and EDA read).
  - In the file names, <host> is O(host) percent-encoded but for letters, digits, C(_.-~:) (and a leading C(.)
    encoded), so any inventory name stays one file inside O(report_dir); an ordinary name is kept as it is.
  - Runs on the controller, in-process (an action plugin); nothing runs on the host.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
attributes:
  check_mode:
    support: full
    details: The stats are published; no file is written, so a check run never replaces a real report.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
    details: Runs on the controller (an action plugin); nothing runs on the managed host.
options:
  report:
    description:
      - The report to publish as it is (with O(stage=group), this node's final report); without it, the report is
        built from O(run) and O(settings).
    type: dict
  stage:
    description:
      - Which report to build without O(report). V(final) is the run's outcome; V(opened) says the run stopped
        inside its outage window (written as the window opens, replaced by the final one).
      - V(group), on a node of a server group once every node has its final report (the fact
        C(sglang_redeploy_report)), returns this node's report (O(report)) with the group's C(outcome) (the status its
        nodes share, or V(split)) and C(failed_nodes), read from the reports of O(group)'s nodes through hostvars, and
        writes it again. A single-node server's report (no O(group)) is returned as it is and no file is written.
    type: str
    choices: [final, opened, group]
    default: final
  report_dir:
    description: Folder on the controller; empty writes no file (the stats are still published).
    type: str
    default: ''
  host:
    description: Name the report is filed under, normally the inventory name.
    type: str
    required: true
  run:
    description:
      - What the run's steps registered, under the step table's run keys (C(plugin_utils/_steps.py); each step's
        results, then the run's notes), as the lookup C(gpuops.sglang.sglang_run) gathers them; each value is a
        registered result (raw), null where the step did not run. A key the table does not name is refused, so a
        misspelt one fails the task instead of reading as a step that never ran.
    type: dict
    default: {}
  settings:
    description: The run's settings the report states; needed to build a report.
    type: dict
    suboptions:
      patch_file:
        description: The patch the run applies (empty for none).
        type: str
        default: ''
      router_url:
        description: The router the server is taken out of and put back into (empty for none).
        type: str
        default: ''
      rollback_deadline:
        description: The guard's deadline in seconds (C(sglang_rollback_deadline)).
        type: raw
        required: true
      rollback_idle:
        description: The guard's idle bound in seconds (C(sglang_rollback_idle)).
        type: raw
        required: true
      perf_gate:
        description: Whether the performance gate is on.
        type: bool
        default: false
      guard_dir:
        description: Where the host's guard writes its report (the window-open report names it).
        type: str
        default: ''
      server_info:
        description:
          - The C(/server_info) keys and values the server must report (C(gpuops.sglang.sglang_plan)'s
            C(expected_server_info)); the report's C(verified_settings) where the run saw the server report them.
        type: dict
        default: {}
      environment:
        description: The environment the server must report (the plan's C(expected_environment)).
        type: dict
        default: {}
      dynamic_spec_env_read_by:
        description: Who reads the dynamic speculation variable in env mode (the plan's C(dynamic_spec_env_read_by)),
          V(patch) or V(installed); empty when env mode is off. The report's C(dynamic_spec_env_read_by).
        type: str
        default: ''
  group:
    description: The server group (C(gpuops.sglang.sglang_plan)'s C(group)) for O(stage=group); none for a single-node server.
    type: dict
'''

EXAMPLES = r'''
- name: Publish this host's report
  gpuops.sglang.sglang_report:
    report: "{{ sglang_redeploy_report }}"
    report_dir: /srv/gpuops/reports
    host: "{{ inventory_hostname }}"
'''

RETURN = r'''
report:
  description:
    - The report published. Its C(group) is null for a single-node server, else C(name), C(nnodes), this node's
      C(rank), and the group's C(outcome) and C(failed_nodes) (null until O(stage=group)).
    - Its C(verified_settings) (C(server_info), C(environment)) are O(settings.server_info) and
      O(settings.environment) where this run saw the healthy server report them on the host (left unchanged, or
      redeployed); null otherwise (failed, rolled back, skipped, a check run that would redeploy, a rank > 0 of a
      server group). The dashboard shows them for a server it does not send its API key to.
    - Its C(dynamic_spec_env_read_by) is V(patch) or V(installed), who reads the dynamic speculation variable in
      env mode (the run refuses env mode that nothing reads), null when env mode is off.
  returned: always
  type: dict
written:
  description: The files written.
  returned: always
  type: list
  elements: str
write_error:
  description:
    - Why the final report could not be written to O(report_dir) (null when it was, or nothing was to be written).
      The report is still returned and published; the role fails the host for it after giving back its fleet
      slot. With O(stage=opened) a failed write fails the task instead (the window must not open without it).
  returned: always
  type: str
'''
