# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: sglang_host_file
short_description: The file name of a host's file in a controller folder, which no inventory name leads out of
version_added: 0.4.0
description:
  - The name the collection's report, tuning and rollback files of a host have in C(sglang_report_dir) (and its
    fleet slot in the slot folder), the same name every writer and reader of that file uses.
  - The inventory name is percent-encoded but for letters, digits, C(_.-~:), and a leading C(.) is encoded too,
    so C(../../x), C(rack/gpu1) or C(..) stay one file inside the folder; an ordinary name (C(gpu1),
    C(gpu-1.example.com)) is kept as it is.
author:
  - gpuops.sglang maintainers (@gpuops)
options:
  _input:
    description: The host's inventory name.
    type: str
    required: true
  kind:
    description: Which of the host's files.
    type: str
    required: true
    choices: [report, last_redeploy, speculation, speculation_vars, rollback, slot]
'''

EXAMPLES = r'''
- name: Write the guard's report beside the redeploy's
  ansible.builtin.copy:
    content: "{{ fired | to_nice_json }}\n"
    dest: "{{ sglang_report_dir }}/{{ inventory_hostname | gpuops.sglang.sglang_host_file('rollback') }}"
    mode: "0644"
  delegate_to: localhost
'''

RETURN = r'''
_value:
  description: The file name, without a folder (C(gpu1.rollback.json), C(%2E.%2F..%2Fx.rollback.json)).
  type: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file


def sglang_host_file(host: str, kind: str) -> str:
    try:
        return host_file(host, kind)
    except ValueError as exc:
        raise AnsibleFilterError('sglang_host_file: %s' % exc)


class FilterModule:
    def filters(self) -> dict:
        return {'sglang_host_file': sglang_host_file}
