#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

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
  - Crash-safe. The commit is recorded in a journal in the package folder before the first rename; a run
    that finds one (an earlier run died mid-commit) first puts the originals back and removes every temp
    file it left, and reports that in RV(recovered).
  - Serialised. Runs on one sglang package take an exclusive lock on its folder and wait for it at most
    O(lock_timeout) seconds, so two runs cannot both report a change and lose one.
  - Refuses, touching nothing, an empty diff, a path that is absolute, climbs out with C(..) or resolves
    outside site-packages through a link, a diff that creates, deletes or renames files or changes a file
    mode (git's C(old mode)/C(new mode)), a file name that is not UTF-8, and a target file that does not
    exist.
  - A target that is a symlink inside site-packages is patched in its real file; the link stays a link.
  - The diff is applied byte for byte, as GNU patch does, so a diff in another encoding than UTF-8 applies
    to files in that encoding; a Python file that no longer compiles afterwards is refused.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.guard_lease
attributes:
  check_mode:
    support: full
    details: Runs the patch on the staging copies and reports what would change; site-packages is not written.
  diff_mode:
    support: full
    details: Shows each changed file before and after.
  platform:
    platforms: posix
options:
  src:
    description: Path of the unified diff on the managed host.
    type: path
  content:
    description:
      - The unified diff text itself, with or without its final newline. C(lookup('ansible.builtin.file'))
        strips the final newline and trailing blank context lines; both are put back from the hunk header.
    type: str
  python:
    description:
      - Interpreter whose C(import sglang) finds the package to patch; also byte-compiles the result.
      - It is asked with C(python -I) from an empty folder, so neither the current folder nor E(PYTHONPATH)
        can point it at another C(sglang).
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
  lock_timeout:
    description: Seconds to wait for another run on the same sglang package to finish before failing.
    type: float
    default: 60
  command_timeout:
    description: Seconds any one command (patch, python) may take before it is killed and the run fails.
    type: float
    default: 60
  stamp:
    description:
      - A file (outside site-packages) where a run that leaves the diff applied records the diff's SHA-256,
        O(python), O(strip) and the SHA-256 of each patched file as it now is; V(state=absent) removes it.
      - M(gpuops.sglang.sglang_server_info) reads it to tell that the diff is still applied without a dry run
        (one round trip for a redeploy with nothing to change). It proves nothing once any patched file
        holds other bytes, so a revert, a reinstall or a rollback simply makes the next run dry-run again.
      - Not written in check mode. A stamp that cannot be written is a warning, not a failure.
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
recovered:
  description:
    - What this run did (in check mode, would do) to repair an earlier run that died mid-commit, one line
      per file; empty when there was nothing to repair.
  returned: always
  type: list
  elements: str
cmd:
  description:
    - The argv lists run, in order (python to find sglang, patch against the staging copies, python to
      byte-compile); each also runs under coreutils C(timeout).
  returned: always
  type: list
  elements: list
'''

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandResult, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils._module import (
    fail,
    new_result,
    require_not_negative,
    require_positive,
    run_module,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._patching import (
    DiffError, Journal, LockTimeout, PackageLock, PatchCommand, PatchTransaction, confine, diff_bytes, diff_text,
    discover_site_packages, is_utf8, parse_targets, read_dist_version, remove_stamp, restore_final_newline,
    sha256_bytes, stray_temp_files, write_stamp,
)


ARGUMENT_SPEC = dict(
    src=dict(type='path'),
    content=dict(type='str'),
    python=dict(type='str', default='python3'),
    site_packages=dict(type='path'),
    strip=dict(type='int', default=1),
    state=dict(type='str', choices=['present', 'absent'], default='present'),
    backup=dict(type='bool', default=False),
    patch=dict(type='path'),
    lock_timeout=dict(type='float', default=60.0),
    command_timeout=dict(type='float', default=60.0),
    guard=GUARD_OPTION,
    stamp=dict(type='path'),
)


class PatchModule:
    """One run: find the package, lock it, repair an interrupted run, dry-run both ways, stage, commit."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        self.result = new_result(site_packages=None, sglang_version=None, files=[],
                                 patch_sha256=None, state=self.params['state'], applied=False,
                                 backup_files=[], recovered=[], cmd=[])
        self.transaction = None
        self.runner = None
        self.lock = None
        self.data = self.python = self.site_packages = self.package_dir = None
        self.targets = self.real_targets = []

    def cleanup(self, result: dict[str, Any] | None = None) -> None:
        """Whatever the outcome: the staging folder goes, the package lock is given back."""
        if self.transaction is not None:
            self.transaction.cleanup()
        if self.lock is not None:
            self.lock.release()

    def run(self, argv: list[str], cwd: str | None = None) -> CommandResult:
        result = self.runner.run(argv, cwd=cwd)
        if result.timed_out:
            fail('%s; nothing was changed in site-packages' % result.describe())
        return result

    def read_diff(self) -> bytes:
        """The diff as bytes, with the final newline a lookup may have stripped put back."""
        if self.params['content'] is not None:
            return diff_bytes(self.params['content'])
        try:
            with open(self.params['src'], 'rb') as handle:
                return restore_final_newline(handle.read())
        except OSError as exc:
            fail('cannot read the diff %s: %s' % (self.params['src'], to_native(exc)))

    def python_path(self) -> str:
        python = self.params['python']
        if os.path.isabs(python):
            if not os.access(python, os.X_OK):
                fail('python %s does not exist or is not executable' % python)
            return python
        found = self.module.get_bin_path(python, required=False)
        if not found:
            fail('python %r was not found on PATH; set python to the server interpreter' % python)
        return found

    def find_site_packages(self, python: str) -> str:
        if self.params['site_packages']:
            site_packages = self.params['site_packages']
        else:
            site_packages, found = discover_site_packages(self.run, python, self.module.tmpdir)
            if found.rc != 0:
                fail('%s cannot find the sglang package (rc %d)%s; is sglang installed for this '
                     'interpreter? Set python or site_packages.'
                     % (python, found.rc, ': ' + found.output if found.output else ''))
            if site_packages is None:
                fail('%s exited 0 but printed no site-packages path (output: %r); is it a Python 3 '
                     'interpreter? Set python to the server\'s interpreter, or set site_packages.'
                     % (python, found.output[-300:]))
        if not os.path.isdir(os.path.join(site_packages, 'sglang')):
            fail('%s holds no sglang package' % site_packages)
        return os.path.realpath(site_packages)

    def dry_run(self, patch: PatchCommand, diff_file: str, reverse: bool) -> tuple[bool, str]:
        argv = patch.apply(self.transaction.staging_tree(), diff_file, self.params['strip'],
                           reverse=reverse, dry_run=True)
        result = self.run(argv)
        return result.rc == 0, result.output

    def byte_compile(self, python: str, paths: list[str], cwd: str) -> tuple[int, str]:
        py_files = [path for path in paths if path.endswith('.py')]
        if not py_files:
            return 0, ''
        result = self.run([python, '-m', 'py_compile'] + py_files, cwd=cwd)
        return result.rc, result.output

    def recover(self, package_dir: str, real_targets: list[str]) -> dict[str, Any]:
        """Repair what an earlier run left mid-commit; in check mode, say what would be repaired.

        Returns {real target: file holding its content after the repair} for check mode's staging copies.
        """
        journal = Journal(package_dir)
        strays = stray_temp_files(real_targets)
        if self.module.check_mode:
            state, sources = journal.plan()
            would = ['would restore %s from the copy an interrupted commit kept' % target for target in sorted(sources)]
            if state:
                would.append('would remove the journal %s of an interrupted commit' % journal.path)
            would.extend('would remove %s left by an interrupted run' % path for path in strays
                         if path not in sources.values())
            self.result['recovered'] = would
            self.result['changed'] = bool(would)
            return sources
        done = journal.recover()
        for path in stray_temp_files(real_targets):
            os.unlink(path)
            done.append('removed %s left by an interrupted run' % path)
        self.result['recovered'] = done
        self.result['changed'] = bool(done)
        return {}

    def record_stamp(self, site_packages: str, targets: list[str], real_targets: list[str]) -> None:
        """Say in the stamp file that the diff is in (or, for state=absent, that no stamp holds)."""
        path = self.params['stamp']
        if not path or self.module.check_mode:
            return
        try:
            if self.result['applied']:
                # The python option as given, not the path it resolves to: sglang_server_info checks the
                # stamp against its own python option, which the role sets to the same string.
                write_stamp(path, self.result['patch_sha256'], self.params['strip'], self.params['python'],
                            site_packages, targets, real_targets)
            else:
                remove_stamp(path)
        except OSError as exc:
            self.module.warn('the patch stamp %s could not be written (the next run dry-runs the patch '
                             'again): %s' % (path, to_native(exc)))

    def locate(self) -> None:
        """The diff, its targets and the sglang package they are confined to; nothing is changed yet."""
        params = self.params
        require_not_negative(params, ('strip', 'lock_timeout'))
        require_positive(params, 'command_timeout')
        self.runner = CommandRunner(self.module, params['command_timeout'])
        self.result['cmd'] = self.runner.cmd
        self.data = self.read_diff()
        self.result['patch_sha256'] = sha256_bytes(self.data)
        try:
            self.targets = parse_targets(diff_text(self.data), params['strip'])
        except DiffError as exc:
            fail('refusing the diff, nothing was changed: %s' % exc)
        self.result['files'] = self.targets
        self.python = self.python_path()
        try:
            self.site_packages = self.find_site_packages(self.python)
        except CommandError as exc:
            fail('%s; nothing was changed' % exc)
        self.result['site_packages'] = self.site_packages
        self.result['sglang_version'] = read_dist_version(self.site_packages)
        try:
            self.real_targets = confine(self.site_packages, self.targets)
        except DiffError as exc:
            fail('refusing the diff, nothing was changed: %s' % exc)
        self.package_dir = os.path.join(self.site_packages, 'sglang')

    def lock_and_recover(self) -> dict[str, Any]:
        """Hold the package lock, repair an interrupted earlier run; the staging sources recover planned."""
        try:
            self.lock = PackageLock(self.package_dir, self.params['lock_timeout']).acquire()
        except LockTimeout as exc:
            fail('%s; nothing was changed' % exc)
        try:
            return self.recover(self.package_dir, self.real_targets)
        except DiffError as exc:
            fail(str(exc))
        except OSError as exc:
            fail('repairing an interrupted earlier commit failed: %s' % to_native(exc))

    def needs_change(self, patch: PatchCommand, diff_file: str, want_applied: bool) -> bool:
        """False when the diff is already as wanted (applied or not): dry runs in both directions."""
        forward_ok, forward_out = self.dry_run(patch, diff_file, reverse=not want_applied)
        if forward_ok:
            return True
        backward_ok, backward_out = self.dry_run(patch, diff_file, reverse=want_applied)
        if backward_ok:
            return False
        fail('the diff applies neither forwards nor backwards to sglang %s in %s (wrong version, '
             'or partly applied); nothing was changed.\nforward: %s\nbackward: %s'
             % (self.result['sglang_version'], self.site_packages, forward_out, backward_out))

    def stage(self, patch: PatchCommand, diff_file: str, want_applied: bool) -> list[str]:
        """Patch and byte-compile the staging copies; the files that change."""
        argv = patch.apply(self.transaction.staging_tree(), diff_file, self.params['strip'], reverse=not want_applied)
        applied = self.run(argv)
        if applied.rc != 0:
            fail('patch failed on the staging copy after a clean dry run (rc %d), nothing was changed: %s'
                 % (applied.rc, applied.output))
        changed_files = self.transaction.changed_files()
        rc, compile_out = self.byte_compile(self.python, [self.transaction.staged_path(rel) for rel in changed_files],
                                            self.transaction.staging)
        if rc != 0:
            encoding = '' if is_utf8(self.data) else (' (the diff is not UTF-8: Python reads source files as UTF-8 '
                                                      'unless they declare another encoding)')
            fail('the patched files do not compile with %s%s, nothing was changed: %s'
                 % (self.python, encoding, compile_out))
        return changed_files

    def commit(self, changed_files: list[str], want_applied: bool) -> None:
        """Into site-packages, all or nothing: the originals come back when writing or compiling fails."""
        if self.params['backup']:
            self.result['backup_files'] = [self.module.backup_local(self.transaction.target_path(rel))
                                           for rel in changed_files]
        try:
            self.transaction.commit(changed_files)
        except OSError as exc:
            self.result['changed'] = bool(self.result['recovered'])
            self.result['applied'] = not want_applied
            fail('writing the patched files failed, the originals were restored: %s' % to_native(exc))
        rc, compile_out = self.byte_compile(self.python, [self.transaction.target_path(rel) for rel in changed_files],
                                            self.site_packages)
        if rc != 0:
            self.transaction.restore(changed_files)
            self.result['changed'] = bool(self.result['recovered'])
            self.result['applied'] = not want_applied
            fail('byte-compiling in place failed, the originals were restored: %s' % compile_out)

    def main(self) -> None:
        lease = Renewer.from_option(None if self.module.check_mode else self.params['guard'], 'sglang_patch')
        # The package lock's wait, then a handful of bounded commands (discover, dry run, patch, compile).
        lease.renew(self.params['lock_timeout'] + 5 * self.params['command_timeout'])
        self._main()
        lease.done()

    def _main(self) -> None:
        self.locate()
        sources = self.lock_and_recover()
        patch = PatchCommand(self.params['patch'] or self.module.get_bin_path('patch', required=True))
        diff_file = os.path.join(self.module.tmpdir, 'change.diff')
        with open(diff_file, 'wb') as handle:
            handle.write(self.data)
        self.transaction = PatchTransaction(self.site_packages, self.targets, self.module.tmpdir,
                                            real_targets=self.real_targets, sources=sources,
                                            journal=Journal(self.package_dir))
        want_applied = self.params['state'] == 'present'
        if self.needs_change(patch, diff_file, want_applied):
            changed_files = self.stage(patch, diff_file, want_applied)
            self.result['changed'] = self.result['changed'] or bool(changed_files)
            self.result['applied'] = want_applied
            if self.module._diff:
                self.result['diff'] = [self.transaction.diff(rel) for rel in changed_files]
            if self.module.check_mode:
                return
            self.commit(changed_files, want_applied)
        else:
            self.result['applied'] = want_applied
        self.record_stamp(self.site_packages, self.targets, self.real_targets)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=[('src', 'content')],
                           required_one_of=[('src', 'content')], supports_check_mode=True)
    run = PatchModule(module)
    run_module(module, run.result, run.main, errors=(LeaseError,), finish=run.cleanup)


if __name__ == '__main__':
    main()
