# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The names of a host's files in a controller folder: the report folder's and the fleet slot folder's.

Every writer and every reader of a per-host file (the role's report actions, the tuner, the rollback playbook
through the sglang_host_file filter, the fleet slot, the dashboard) names it here, so they agree and no inventory
name leads out of its folder.
"""

from __future__ import annotations

from urllib.parse import quote

# What each per-host file is called after the host's encoded name. The report and the slot share '.json': they
# live in different folders (sglang_report_dir, the fleet slot folder).
SUFFIXES = {
    'report': '.json',
    'last_redeploy': '.last-redeploy.json',
    'speculation': '.speculation.json',
    'speculation_vars': '.speculation.vars.yml',
    'rollback': '.rollback.json',
    'slot': '.json',
}


def host_file(host: str, kind: str) -> str:
    """The file name of the host's file of this kind (a key of SUFFIXES): the inventory name percent-encoded.

    Ansible takes any inventory name ('../../x', 'rack/gpu1', '..'): written as it is, a '/' leads out of the
    folder. Every byte but letters, digits, '_.-~' and ':' (a group's key, group:NAME) is encoded, '%' included,
    so each host gets one plain file of its own; a leading '.' is encoded too, so that no name is '.', '..' or
    hidden, whatever the suffix. An ordinary name (gpu1, gpu-1.example.com, group:big) is kept as it is: the
    files written before this encoding keep their names.
    """
    if kind not in SUFFIXES:
        raise ValueError('%r is no kind of host file; the kinds are %s' % (kind, ', '.join(sorted(SUFFIXES))))
    encoded = quote(host, safe=':')
    if encoded.startswith('.'):
        encoded = '%2E' + encoded[1:]
    return encoded + SUFFIXES[kind]
