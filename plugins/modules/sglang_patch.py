#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: sglang_patch
short_description: Apply or revert a unified diff on the installed sglang package, atomically
version_added: 0.1.0
description:
  - Finds the site-packages folder that holds C(sglang) for interpreter O(python) (or uses O(site_packages)),
    and applies (O(state=present)) or reverts (O(state=absent)) a unified diff to it.
  - All or nothing. GNU patch runs on copies of the target files in a staging folder; the patched files
    are byte-compiled with O(python); only then is each file written beside its target and renamed
    into place. If any step fails, every original is restored, so site-packages stays byte-identical.
  - Idempotent by content. An already applied patch is V(changed=false); a patch that applies neither
    forwards nor backwards (for example half applied, or written for another sglang version) is refused.
    A changed patch file is judged by its new content, not by a marker.
  - Refuses, touching nothing, an empty diff, a path that is absolute, climbs out with C(..) or resolves
    outside site-packages through a link, a diff that creates, deletes or renames files, and a target
    file that does not exist.
author:
  - gpuops.sglang maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Runs the patch on the staging copies and reports what would change; site-packages is not written.
  diff_mode:
    support: full
    description: Shows each changed file before and after.
options:
  src:
    description: Path of the unified diff on the managed host.
    type: path
  content:
    description: The unified diff text itself.
    type: str
  python:
    description: Interpreter whose C(import sglang) finds the package to patch; also byte-compiles the result.
    type: str
    default: python3
  site_packages:
    description: The folder that holds the C(sglang) package. Skips discovery through O(python).
    type: path
  strip:
    description: Leading path components removed from the file names in the diff (C(patch -p)).
    type: int
    default: 1
  state:
    description: V(present) applies the diff, V(absent) reverts it.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description: Keep a timestamped copy of each file before it is changed, beside it.
    type: bool
    default: false
  patch:
    description: Path of GNU patch. Found on E(PATH) when not given.
    type: path
requirements:
  - GNU patch 2.7 or later on the managed host.
notes:
  - Byte-compiling with O(python) refreshes C(__pycache__), so a server running as another user does not
    need write access there to pick up the change.
seealso:
  - module: ansible.posix.patch
    description: The generic module; it re-applies nothing once a file changed and shows no diff.
'''

EXAMPLES = r'''
- name: Apply the dynamic-speculation patch to the server's venv
  gpuops.sglang.sglang_patch:
    src: /opt/patches/eagle_dynamic_spec.diff
    python: /opt/sglang/venv/bin/python

- name: Preview the change without writing
  gpuops.sglang.sglang_patch:
    content: "{{ lookup('ansible.builtin.file', 'eagle_dynamic_spec.diff') }}"
    python: /opt/sglang/venv/bin/python
  check_mode: true
  diff: true

- name: Revert it
  gpuops.sglang.sglang_patch:
    src: /opt/patches/eagle_dynamic_spec.diff
    site_packages: /opt/sglang/venv/lib/python3.11/site-packages
    state: absent
'''

RETURN = r'''
site_packages:
  description: The folder the diff was applied in.
  returned: always
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages
sglang_version:
  description: Installed sglang version from its dist-info (null when unknown).
  returned: always
  type: str
  sample: 0.5.12.post1
files:
  description: Files the diff touches, relative to RV(site_packages).
  returned: always
  type: list
  elements: str
  sample: [sglang/srt/speculative/eagle_worker.py]
patch_sha256:
  description: SHA-256 of the diff text, to tell which patch a host carries.
  returned: always
  type: str
state:
  description: The requested state.
  returned: always
  type: str
applied:
  description: Whether the diff is applied at the end (in check mode, would be).
  returned: always
  type: bool
backup_files:
  description: Backup copies made when O(backup=true).
  returned: always
  type: list
  elements: str
cmd:
  description: The patch argv lists run, in order (all against the staging copies).
  returned: always
  type: list
  elements: list
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils._patching import (
    DISCOVER_SITE_PACKAGES,
    DiffError,
    PatchCommand,
    PatchTransaction,
    confine,
    parse_targets,
    read_dist_version,
    sha256_text,
)

C_LOCALE = {'LANG': 'C', 'LC_ALL': 'C'}


class PatchModule(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.result = dict(changed=False, site_packages=None, sglang_version=None, files=[],
                           patch_sha256=None, state=self.params['state'], applied=False,
                           backup_files=[], cmd=[])
        self.transaction = None

    def fail(self, msg):
        if self.transaction is not None:
            self.transaction.cleanup()
        self.module.fail_json(msg=msg, **self.result)

    def run(self, argv, cwd=None):
        return self.module.run_command(argv, environ_update=C_LOCALE, cwd=cwd)

    def read_diff(self):
        if self.params['content'] is not None:
            return self.params['content']
        try:
            with open(self.params['src'], 'rb') as handle:
                return to_native(handle.read(), errors='surrogate_or_strict')
        except (IOError, OSError) as exc:
            self.fail('cannot read the diff %s: %s' % (self.params['src'], to_native(exc)))

    def python_path(self):
        python = self.params['python']
        if os.path.isabs(python):
            if not os.access(python, os.X_OK):
                self.fail('python %s does not exist or is not executable' % python)
            return python
        found = self.module.get_bin_path(python, required=False)
        if not found:
            self.fail('python %r was not found on PATH; set python to the server interpreter' % python)
        return found

    def find_site_packages(self, python):
        if self.params['site_packages']:
            site_packages = self.params['site_packages']
        else:
            rc, out, err = self.run([python, '-c', DISCOVER_SITE_PACKAGES])
            if rc != 0:
                self.fail('%s cannot find the sglang package (rc %d)%s; is sglang installed for this '
                          'interpreter? Set python or site_packages.' % (python, rc, ': ' + err.strip() if err.strip() else ''))
            site_packages = out.strip()
        if not os.path.isdir(os.path.join(site_packages, 'sglang')):
            self.fail('%s holds no sglang package' % site_packages)
        return os.path.realpath(site_packages)

    def dry_run(self, patch, diff_file, reverse):
        argv = patch.apply(self.transaction.staging_tree(), diff_file, self.params['strip'],
                           reverse=reverse, dry_run=True)
        self.result['cmd'].append(argv)
        rc, out, err = self.run(argv)
        return rc == 0, (out + err).strip()

    def byte_compile(self, python, paths, cwd):
        py_files = [path for path in paths if path.endswith('.py')]
        if not py_files:
            return 0, ''
        rc, out, err = self.run([python, '-m', 'py_compile'] + py_files, cwd=cwd)
        return rc, (out + err).strip()

    def main(self):
        params = self.params
        if params['strip'] < 0:
            self.fail('strip must not be negative')
        diff_text = self.read_diff()
        self.result['patch_sha256'] = sha256_text(diff_text)
        try:
            targets = parse_targets(diff_text, params['strip'])
        except DiffError as exc:
            self.fail('refusing the diff, nothing was changed: %s' % exc)
        self.result['files'] = targets

        python = self.python_path()
        site_packages = self.find_site_packages(python)
        self.result['site_packages'] = site_packages
        self.result['sglang_version'] = read_dist_version(site_packages)
        try:
            confine(site_packages, targets)
        except DiffError as exc:
            self.fail('refusing the diff, nothing was changed: %s' % exc)

        patch = PatchCommand(params['patch'] or self.module.get_bin_path('patch', required=True))
        diff_file = os.path.join(self.module.tmpdir, 'change.diff')
        with open(diff_file, 'wb') as handle:
            handle.write(diff_text.encode('utf-8', 'surrogateescape'))

        self.transaction = PatchTransaction(site_packages, targets, self.module.tmpdir)
        want_applied = params['state'] == 'present'
        forward_ok, forward_out = self.dry_run(patch, diff_file, reverse=not want_applied)
        if not forward_ok:
            backward_ok, backward_out = self.dry_run(patch, diff_file, reverse=want_applied)
            if backward_ok:
                self.result['applied'] = want_applied
                self.transaction.cleanup()
                self.module.exit_json(**self.result)
            self.fail('the diff applies neither forwards nor backwards to sglang %s in %s (wrong version, '
                      'or partly applied); nothing was changed.\nforward: %s\nbackward: %s'
                      % (self.result['sglang_version'], site_packages, forward_out, backward_out))

        argv = patch.apply(self.transaction.staging_tree(), diff_file, params['strip'], reverse=not want_applied)
        self.result['cmd'].append(argv)
        rc, out, err = self.run(argv)
        if rc != 0:
            self.fail('patch failed on the staging copy after a clean dry run (rc %d), nothing was changed: %s'
                      % (rc, (out + err).strip()))
        changed_files = self.transaction.changed_files()
        rc, compile_out = self.byte_compile(python, [self.transaction.staged_path(rel) for rel in changed_files],
                                            self.transaction.staging)
        if rc != 0:
            self.fail('the patched files do not compile with %s, nothing was changed: %s' % (python, compile_out))

        self.result['changed'] = bool(changed_files)
        self.result['applied'] = want_applied
        if self.module._diff:
            self.result['diff'] = [self.transaction.diff(rel) for rel in changed_files]
        if self.module.check_mode:
            self.transaction.cleanup()
            self.module.exit_json(**self.result)

        if params['backup']:
            self.result['backup_files'] = [self.module.backup_local(self.transaction.target_path(rel))
                                           for rel in changed_files]
        try:
            self.transaction.commit(changed_files)
        except (IOError, OSError) as exc:
            self.result['changed'] = False
            self.result['applied'] = not want_applied
            self.fail('writing the patched files failed, the originals were restored: %s' % to_native(exc))
        rc, compile_out = self.byte_compile(python, [self.transaction.target_path(rel) for rel in changed_files],
                                            site_packages)
        if rc != 0:
            self.transaction.restore(changed_files)
            self.result['changed'] = False
            self.result['applied'] = not want_applied
            self.fail('byte-compiling in place failed, the originals were restored: %s' % compile_out)
        self.transaction.cleanup()
        self.module.exit_json(**self.result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type='path'),
            content=dict(type='str'),
            python=dict(type='str', default='python3'),
            site_packages=dict(type='path'),
            strip=dict(type='int', default=1),
            state=dict(type='str', choices=['present', 'absent'], default='present'),
            backup=dict(type='bool', default=False),
            patch=dict(type='path'),
        ),
        mutually_exclusive=[('src', 'content')],
        required_one_of=[('src', 'content')],
        supports_check_mode=True,
    )
    PatchModule(module).main()


if __name__ == '__main__':
    main()
