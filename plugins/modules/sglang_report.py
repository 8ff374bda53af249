#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: sglang_report
short_description: Write a host's redeploy report on the controller and into the run's artifacts
version_added: 0.2.0
description:
  - Writes O(report) as JSON to O(report_dir)/<host>.json on the controller (and to <host>.last-redeploy.json
    when its C(status) is V(redeployed)), atomically, and publishes it in the run's custom stats under
    C(sglang_redeploy), keyed by host, which ansible-runner saves as the job's artifacts (what AWX and EDA read).
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
    description: The report.
    type: dict
    required: true
  report_dir:
    description: Folder on the controller; empty writes no file (the stats are still published).
    type: str
    default: ''
  host:
    description: Name the report is filed under, normally the inventory name.
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Publish this host's report
  gpuops.sglang.sglang_report:
    report: "{{ sglang_redeploy_report }}"
    report_dir: /srv/gpuops/reports
    host: "{{ inventory_hostname }}"
'''

RETURN = r'''
written:
  description: The files written.
  returned: always
  type: list
  elements: str
'''
