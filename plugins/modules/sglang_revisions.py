#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_revisions
short_description: List an SGLang server's revisions, check that the next one fits, or put one back
version_added: 0.4.0
description:
  - Every confirmed redeploy that changed something records a revision of the server (M(gpuops.sglang.sglang_guard)
    O(gpuops.sglang.sglang_guard#module:revisions) at the confirmation) in O(folder)C(/revisions/N/), every file the
    run changed as it was before and after, with mode, owner and SHA-256 (docs/undo.md, "Revisions").
  - O(state=listed) lists them (number, origin, time, run id, sglang version, patch, what changed, size), oldest
    first; a revision whose index cannot be believed, or one of whose kept copies is missing or damaged, is left out
    and named in RV(problems).
  - O(state=checked) refuses, before anything stops, a run whose revision would not leave O(margin_mib) MiB free on
    the file system of the revisions folder (C(statvfs)); the estimate counts each of O(files) twice (before and
    after), four times when the server has no revision yet (revision 1, the state found, is recorded too).
  - O(state=planned) says what putting the server back to revision O(to) writes (every file the revisions after it
    changed, each as the first of them found it) and refuses, with the reason, a revision not kept, an index this
    collection did not write, files whose live state is not what the latest revision left (changed by hand, named),
    and a kept copy it would write that is missing or damaged (each read and its SHA-256 checked, named with its
    revision). With O(not_after_undo), a latest revision that is itself an undo is refused too. Read only.
  - O(state=restored) plans the same way, then writes every file back byte for byte, with its mode and owner, all or
    nothing (each staged beside its target, then renamed into place); in the outage window, under the guard's lease
    (O(guard)), the guard armed over every file it writes (RV(undo.guard_files)). The run's confirmation then records
    the undo as a new revision (docs/undo.md, "Putting a revision back").
  - O(state=listed), O(state=checked) and O(state=planned) only read. Every state refuses a folder another user could
    write (the guard's trust rule, docs/guard.md).
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.guard_lease
attributes:
  check_mode:
    support: full
    details: O(state=restored) in check mode plans, checks and returns what it would write, and writes nothing.
  diff_mode:
    support: none
    details: Nothing is changed, so there is no diff.
  platform:
    platforms: posix
options:
  state:
    description: List the revisions, check that the next one fits, plan an undo, or put a revision back.
    type: str
    choices: [listed, checked, planned, restored]
    default: listed
  folder:
    description:
      - The server's guard folder (the role's C(sglang_guard_dir/SERVICE)); the revisions are in its C(revisions) folder.
      - It and every folder above it must belong to root (or the user the module runs as) and be writable by no one
        else; a system folder (C(/), C(/var/lib), ...) is refused.
    type: path
    required: true
  files:
    description: The files the run may change (the guard's files), for O(state=checked).
    type: list
    elements: path
    default: []
  kept:
    description: How many revisions are kept (the role's C(sglang_revisions_kept)); V(0) records none, so nothing is checked.
    type: int
    default: 5
  margin_mib:
    description: MiB of free space a revision must leave on its file system (O(state=checked)).
    type: int
    default: 256
  to:
    description:
      - The revision to put back (O(state=planned), O(state=restored)); by default the one before the latest.
    type: int
  not_after_undo:
    description:
      - With O(state=planned) or O(state=restored), refuse when the latest revision is itself an undo (origin V(undo)).
      - The role sets it for an undo an alert started (C(gpuops_undo_trigger) defined), so an alert that keeps firing
        never undoes the undo it caused; an operator undoes an undo by hand, with O(to).
    type: bool
    default: false
seealso:
  - module: gpuops.sglang.sglang_guard
'''

EXAMPLES = r'''
- name: List the server's revisions
  gpuops.sglang.sglang_revisions:
    folder: /var/lib/gpuops-sglang/sglang
  register: listed

- name: Refuse a run whose revision would not fit the disk
  gpuops.sglang.sglang_revisions:
    state: checked
    folder: /var/lib/gpuops-sglang/sglang
    files:
      - /etc/sglang/launch.json
      - /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker.py
    kept: 5

- name: Put the server back to revision 1, under the window's guard
  gpuops.sglang.sglang_revisions:
    state: restored
    folder: /var/lib/gpuops-sglang/sglang
    to: 1
    guard:
      folder: /var/lib/gpuops-sglang/sglang
      run_id: gpu2-20261205T214002
'''

RETURN = r'''
revisions:
  description: Each revision kept, oldest first ([] where there is none, and for O(state=checked)).
  returned: always
  type: list
  elements: dict
  contains:
    number:
      description: Its number (1 is the state the first recorded run found).
      type: int
    origin:
      description: V(found) (revision 1, the state found), V(redeploy), or V(undo) (an undo run's, see RV(revisions[].undo_to)).
      type: str
    undo_to:
      description: The revision an undo put back (null unless RV(revisions[].origin) is V(undo)).
      type: int
    time:
      description: When it was recorded (seconds since the epoch, host clock); revision 1's is the first run's arm.
      type: float
    time_utc:
      description: The same, as C(YYYY-MM-DDTHH:MM:SSZ).
      type: str
    run_id:
      description: The run that recorded it.
      type: str
    host:
      description: The inventory name of the host that recorded it.
      type: str
    sglang_version:
      description: The sglang version the run left (null when not known).
      type: str
    patch_sha256:
      description: The SHA-256 of the run's patch (null when none).
      type: str
    changed:
      description: The files the revision holds, each with what the run did to it.
      type: list
      elements: dict
      contains:
        path:
          description: The file.
          type: str
        change:
          description: V(created), V(removed), V(modified), V(mode changed), V(owner changed), or V(found) (revision 1).
          type: str
    size_bytes:
      description: Bytes the revision takes (its index and every copy).
      type: int
count:
  description: How many revisions are kept.
  returned: always
  type: int
latest:
  description: The newest revision's number (null when there is none).
  returned: always
  type: int
total_bytes:
  description: Bytes all revisions take.
  returned: always
  type: int
problems:
  description: A revision left out of RV(revisions), each with why (an index that cannot be believed, a kept copy missing or damaged).
  returned: always
  type: list
  elements: str
space:
  description: The numbers of O(state=checked) (null for O(state=listed)).
  returned: always
  type: dict
  contains:
    needed_bytes:
      description: The estimate of the next revision's size.
      type: int
    free_bytes:
      description: Bytes available on the file system (C(f_bavail) x C(f_frsize)); null when O(kept=0).
      type: int
    margin_bytes:
      description: O(margin_mib) in bytes.
      type: int
    where:
      description: The folder asked (the revisions folder, or its nearest folder that exists).
      type: str
    problem:
      description: Why the revision would not fit ("" when it fits).
      type: str
undo:
  description: What O(state=planned) or O(state=restored) puts back (null for the other states).
  returned: always
  type: dict
  contains:
    target:
      description: The revision put back.
      type: int
    run_id:
      description:
        - The run that recorded the revision put back (on every node of a server group that run redeployed together,
          the same).
      type: str
    latest:
      description: The current revision (the latest kept) before the undo.
      type: int
    kept:
      description: The revisions kept.
      type: list
      elements: int
    guard_files:
      description: Every file the undo writes or removes; the guard must keep them all before anything stops.
      type: list
      elements: str
    files:
      description: Each file put back.
      type: list
      elements: dict
      contains:
        path:
          description: The file.
          type: str
        action:
          description: V(write) (its bytes), V(link) (a symlink), or V(remove) (it did not exist at the revision).
          type: str
        source:
          description: The revision whose before-image holds the file as it was at O(to).
          type: int
        sha256:
          description: The SHA-256 of the bytes put back (null for a link or a removal).
          type: str
    written:
      description: Whether the files were written (false in check mode and for O(state=planned)).
      type: bool
'''

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._revisions import Revisions, RevisionError
from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, require_not_negative, run_module

ARGUMENT_SPEC = dict(
    state=dict(type='str', default='listed', choices=['listed', 'checked', 'planned', 'restored']),
    folder=dict(type='path', required=True),
    files=dict(type='list', elements='path', default=[]),
    kept=dict(type='int', default=5),
    margin_mib=dict(type='int', default=256),
    to=dict(type='int'),
    not_after_undo=dict(type='bool', default=False),
    guard=GUARD_OPTION,
)


def listed(revisions: Revisions, params: dict[str, Any], result: dict[str, Any]) -> None:
    found, problems = revisions.listed()
    result.update(revisions=found, count=len(found), latest=found[-1]['number'] if found else None,
                  total_bytes=sum(entry['size_bytes'] for entry in found), problems=problems)


def checked(revisions: Revisions, params: dict[str, Any], result: dict[str, Any]) -> None:
    space = revisions.check(params['files'], params['kept'], params['margin_mib'] * 1024 * 1024)
    result['space'] = space
    if space['problem']:
        fail(space['problem'] + '; nothing was stopped or changed')


def undo(module: AnsibleModule, revisions: Revisions, params: dict[str, Any], result: dict[str, Any]) -> None:
    plan = revisions.plan_undo(params['to'], params['not_after_undo'])
    files = [{'path': entry['path'], 'action': entry['action'], 'source': entry['source'],
              'sha256': (entry['want'] or {}).get('sha256')} for entry in plan['files']]
    result['undo'] = {'target': plan['target'], 'run_id': plan['run_id'], 'latest': plan['latest'], 'kept': plan['kept'],
                      'guard_files': [entry['path'] for entry in files], 'files': files, 'written': False}
    if params['state'] == 'planned' or module.check_mode:
        return
    # A handful of reads and renames per file: the lease is renewed per file, and held for the step's own bound.
    lease = Renewer.from_option(params['guard'], 'sglang_revisions restored')
    lease.renew(60)
    result['undo']['files'] = revisions.restore(plan, lambda: lease.tick(60))
    result['undo']['written'] = True
    result['changed'] = bool(files)
    lease.done()


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    result = new_result(revisions=[], count=0, latest=None, total_bytes=0, problems=[], space=None, undo=None)

    def body() -> None:
        require_not_negative(params, ('kept', 'margin_mib'))
        if params['to'] is not None and params['to'] < 1:
            fail('to must be a revision number (1 or more), got %d' % params['to'])
        if params['state'] in ('planned', 'restored'):
            undo(module, Revisions(params['folder']), params, result)
            return
        action = listed if params['state'] == 'listed' else checked
        action(Revisions(params['folder']), params, result)
    run_module(module, result, body, errors=(RevisionError, LeaseError, OSError, ValueError),
               describe=lambda exc: 'sglang_revisions %s failed: %s' % (params['state'], to_native(exc)))


if __name__ == '__main__':
    main()
