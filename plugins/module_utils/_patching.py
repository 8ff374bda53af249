# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unified diffs applied to a package tree: parsing, path confinement, GNU patch argv, staging.

The contract is all-or-nothing. GNU patch runs only against copies in a
staging folder; site-packages changes only in ``PatchTransaction.commit``,
which first writes every new file beside its target and only then renames
them into place, restoring the originals if any rename fails.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import os
import shutil
import tempfile


class DiffError(Exception):
    """The diff is empty, malformed, escapes the tree, or asks for what we do not support."""


# GNU patch reads git extensions too; renames, new or deleted files and binary
# hunks would let a diff touch paths we never confined, so they are refused.
_UNSUPPORTED_GIT_LINES = ('rename from ', 'rename to ', 'copy from ', 'copy to ', 'new file mode ',
                          'deleted file mode ', 'GIT binary patch', 'Binary files ')


def _header_name(line):
    name = line[4:].split('\t', 1)[0].rstrip('\r\n')
    if name.startswith('"'):
        raise DiffError('quoted file names are not supported: %r' % line.strip())
    return name.rstrip()


def _strip_components(name, strip):
    parts = name.split('/')
    if name.startswith('/'):
        raise DiffError('absolute path in diff: %r' % name)
    if len(parts) <= strip:
        raise DiffError('path %r has fewer than strip=%d+1 components' % (name, strip))
    stripped = parts[strip:]
    if any(part == '..' for part in stripped):
        raise DiffError('path escapes the target tree: %r' % name)
    cleaned = [part for part in stripped if part not in ('', '.')]
    if not cleaned:
        raise DiffError('empty path in diff: %r' % name)
    return '/'.join(cleaned)


def parse_targets(diff_text, strip):
    """Relative paths the diff modifies, in order of appearance, each once.

    Raises DiffError for an empty diff, hunks without file headers, paths that
    are absolute or climb out with '..', and file creation, deletion or rename.
    """
    targets = []
    hunks = 0
    pending_old = None
    current = None
    for line in diff_text.splitlines():
        if line.startswith(_UNSUPPORTED_GIT_LINES):
            raise DiffError('unsupported diff feature (only modifications of existing text files): %r'
                            % line.strip())
        if line.startswith('--- '):
            pending_old = _header_name(line)
            continue
        if line.startswith('+++ ') and pending_old is not None:
            new = _header_name(line)
            if '/dev/null' in (pending_old, new):
                raise DiffError('the diff creates or deletes a file (%s -> %s); only existing files can be patched'
                                % (pending_old, new))
            old_rel = _strip_components(pending_old, strip)
            new_rel = _strip_components(new, strip)
            if old_rel != new_rel:
                raise DiffError('the diff renames %s to %s; renames are not supported' % (old_rel, new_rel))
            current = new_rel
            if current not in targets:
                targets.append(current)
            pending_old = None
            continue
        pending_old = None
        if line.startswith('@@ '):
            if current is None:
                raise DiffError('hunk before any ---/+++ file header: %r' % line.strip())
            hunks += 1
    if hunks == 0:
        raise DiffError('the diff contains no hunks (empty or not a unified diff); refusing it, '
                        'since GNU patch would "apply" it silently')
    return targets


def confine(tree, relative_paths):
    """Absolute paths for relative_paths, each an existing regular file really inside tree."""
    root = os.path.realpath(tree)
    absolute = []
    for rel in relative_paths:
        path = os.path.join(root, rel)
        real = os.path.realpath(path)
        if not (real == root or real.startswith(root + os.sep)):
            raise DiffError('%s resolves to %s, outside %s' % (rel, real, root))
        if not os.path.isfile(real):
            raise DiffError('target file %s does not exist in %s' % (rel, root))
        absolute.append(real)
    return absolute


def sha256_text(text):
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


class PatchCommand(object):
    """argv builder for GNU patch, strict enough to never guess or prompt."""

    def __init__(self, patch_path):
        self.path = patch_path

    def apply(self, directory, patch_file, strip, reverse=False, dry_run=False):
        argv = [
            self.path,
            '--batch',            # never stop at "File to patch:"
            '--forward',          # an applied patch is an error, never silently reversed
            '--unified',          # the only format parse_targets confined
            '--fuzz=0',           # a hunk applies exactly or not at all
            '--strip=%d' % strip,
            '--directory=%s' % directory,
            '--input=%s' % patch_file,
            '--no-backup-if-mismatch',
            '--reject-file=-',
        ]
        if reverse:
            argv.append('--reverse')
        if dry_run:
            argv.append('--dry-run')
        return argv


def read_dist_version(site_packages, distribution='sglang'):
    """Version from DIST-*.dist-info/METADATA without importing the package (sglang imports torch)."""
    pattern = os.path.join(site_packages, '%s-*.dist-info' % distribution)
    for info_dir in sorted(glob.glob(pattern)):
        metadata = os.path.join(info_dir, 'METADATA')
        try:
            with open(metadata, 'rb') as handle:
                for raw in handle:
                    line = raw.decode('utf-8', 'replace')
                    if line.startswith('Version:'):
                        return line.split(':', 1)[1].strip()
                    if not line.strip():
                        break
        except (IOError, OSError):
            continue
    return None


# Prints the folder that holds the sglang package, found without importing it.
DISCOVER_SITE_PACKAGES = (
    "import importlib.util, os, sys\n"
    "spec = importlib.util.find_spec('sglang')\n"
    "locs = list(spec.submodule_search_locations or []) if spec else []\n"
    "sys.exit(3) if not locs else print(os.path.dirname(os.path.realpath(locs[0])))\n"
)


def read_bytes(path):
    with open(path, 'rb') as handle:
        return handle.read()


class PatchTransaction(object):
    """Copies of the target files in a staging folder, and an all-or-nothing commit back.

    ``staging_parent`` can be anywhere (check mode uses the module's temp
    folder); commit writes each new file next to its target and renames it,
    so every single replacement is atomic and the set is rolled back on error.
    """

    SUFFIX = '.sglang_patch.tmp'

    def __init__(self, tree, relative_paths, staging_parent):
        self.tree = os.path.realpath(tree)
        self.relative_paths = list(relative_paths)
        self.staging = tempfile.mkdtemp(prefix='sglang_patch-', dir=staging_parent)
        self.originals = {}
        for rel in self.relative_paths:
            source = os.path.join(self.tree, rel)
            staged = self.staged_path(rel)
            if not os.path.isdir(os.path.dirname(staged)):
                os.makedirs(os.path.dirname(staged))
            self.originals[rel] = read_bytes(source)
            with open(staged, 'wb') as handle:
                handle.write(self.originals[rel])
            shutil.copystat(source, staged)

    def staging_tree(self):
        return os.path.join(self.staging, 'tree')

    def staged_path(self, rel):
        return os.path.join(self.staging_tree(), rel)

    def target_path(self, rel):
        return os.path.join(self.tree, rel)

    def changed_files(self):
        return [rel for rel in self.relative_paths
                if read_bytes(self.staged_path(rel)) != self.originals[rel]]

    def diff(self, rel):
        def text(data):
            return data.decode('utf-8', 'replace')
        return {
            'before_header': rel + ' (before)',
            'after_header': rel + ' (after)',
            'before': text(self.originals[rel]),
            'after': text(read_bytes(self.staged_path(rel))),
        }

    def commit(self, relative_paths):
        """Replace targets with staged files; on any error put every original back and re-raise."""
        temps = {}
        try:
            for rel in relative_paths:
                temps[rel] = self._write_beside(rel, read_bytes(self.staged_path(rel)))
        except Exception:
            self._discard(temps)
            raise
        replaced = []
        try:
            for rel in relative_paths:
                os.rename(temps[rel], self.target_path(rel))
                del temps[rel]
                replaced.append(rel)
        except Exception:
            self._discard(temps)
            self.restore(replaced)
            raise
        return replaced

    def restore(self, relative_paths):
        """Put the original bytes back, each with an atomic rename."""
        for rel in relative_paths:
            os.rename(self._write_beside(rel, self.originals[rel]), self.target_path(rel))

    def _write_beside(self, rel, data):
        target = self.target_path(rel)
        stat = os.stat(target)
        directory, name = os.path.split(target)
        handle, temp = tempfile.mkstemp(prefix='.' + name + '.', suffix=self.SUFFIX, dir=directory)
        try:
            with os.fdopen(handle, 'wb') as out:
                out.write(data)
            os.chmod(temp, stat.st_mode & 0o7777)
            if os.geteuid() == 0:
                os.chown(temp, stat.st_uid, stat.st_gid)
        except Exception:
            os.unlink(temp)
            raise
        return temp

    @staticmethod
    def _discard(temps):
        for temp in temps.values():
            try:
                os.unlink(temp)
            except OSError:
                pass

    def cleanup(self):
        shutil.rmtree(self.staging, ignore_errors=True)
