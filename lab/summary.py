#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""`lab/lab summary`: each host's last redeploy report in the lab's report folder, for a person to read.

The report folder (sglang_report_dir) holds several kinds of per-host files, named by one function
(plugins/plugin_utils/_host_files.host_file): the redeploy report, the last redeploy's copy, the speculation
tuner's table and vars file, the rollback playbook's record. Only the redeploy reports are summarised here: a
tuning run's gpu2.speculation.json read as a report once crashed `make demo` (issue 43).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

HOST_FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'plugins', 'plugin_utils', '_host_files.py')


def _suffixes() -> dict[str, str]:
    # By path: lab/lab runs this with the system python3, where the collection is not importable, and
    # _host_files is stdlib-only.
    spec = importlib.util.spec_from_file_location('_host_files', HOST_FILES)
    host_files = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_files)
    return host_files.SUFFIXES


def redeploy_reports(folder: str) -> list[str]:
    """The names of the redeploy reports in `folder`, sorted: `<host>.json`, not another kind's file."""
    suffixes = _suffixes()
    report = suffixes['report']
    # The other kinds' suffixes that end in the report's own ('.speculation.json' ends in '.json').
    others = tuple(suffix for suffix in suffixes.values() if suffix != report)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [name for name in names if name.endswith(report) and not name.endswith(others)]


def is_redeploy_report(report: object) -> bool:
    # The role writes these keys every run (plugins/plugin_utils report); a file of another shape is not one.
    return isinstance(report, dict) and all(key in report for key in ('host', 'service_manager', 'status'))


def print_report(r: dict) -> None:
    print('== %s (%s)' % (r['host'], r['service_manager']))
    print('   status          : %s, healthy %s' % (r['status'], r['healthy']))
    print('   why             : %s' % r['reason'])
    print('   killed (in LXC) : %s' % (', '.join(r['killed_in_container']) or '-'))
    print('   GPU holders     : %s' % (', '.join(r['killed_gpu_holders']) or '-'))
    if r.get('spared_gpu_holders'):
        print('   spared holders  : %s' % ', '.join(r['spared_gpu_holders']))
    print('   GPU MiB before  : %s   after release: %s' % (r['gpu_memory_before_mib'], r['gpu_memory_released_mib'] or '-'))
    print('   patch           : %s (sglang %s, sha256 %s)' % (r['patch'], r['sglang_version'], r['patch_sha256'][:12]))
    group = r.get('group')
    if group:
        # A node of a multi-node server (inventory/lab-multinode): the group's name, its rank, its outcome.
        print('   group           : %s' % (', '.join('%s %s' % (k, v) for k, v in sorted(group.items()))
                                         if isinstance(group, dict) else group))
    router = r.get('router') or {}
    if router.get('url') and isinstance(group, dict) and group.get('rank'):
        # A rank > 0 serves no HTTP: rank 0 is the group's worker in the router.
        print('   router          : %s: not a worker (rank 0 is, for the group)' % router['url'])
    elif router.get('url'):
        drain = router.get('drain') or {}

        # None: the run did not ask the router (a no-op reads nothing there), which says nothing of membership.
        def known(member: bool | None) -> str:
            return 'not asked' if member is None else ('in it' if member else 'not in it')
        before = router.get('member_before')
        steps = ['%s before%s' % (known(before), ' (left out)' if before is False else '')]
        if router.get('removed'):
            steps.append('taken out, %s request(s) in flight, drained in %ss%s' % (
                drain.get('in_flight_at_start'), drain.get('waited_s'), '' if drain.get('idle') else ' (NOT idle)'))
        steps.append('back in' if router.get('readmitted') else '%s now' % known(router.get('member')))
        print('   router          : %s: %s' % (router['url'], ', '.join(steps)))
    phases = ', '.join('%s %ss' % (k, v) for k, v in sorted(r['phases_s'].items()) if v is not None)
    print('   downtime        : %ss (stop to first healthy answer, host clock)%s' % (r['downtime_s'], ('; ' + phases) if phases else ''))


def main(folder: str) -> int:
    names = redeploy_reports(folder)
    if not names:
        sys.exit('no redeploy report yet in %s: run make demo' % folder)
    for name in names:
        with open(os.path.join(folder, name)) as handle:
            report = json.load(handle)
        if not is_redeploy_report(report):
            print('(%s is named like a redeploy report but has no host, service_manager and status: left out)'
                  % name, file=sys.stderr)
            continue
        print_report(report)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
