import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils import _patching as patching

DIFF = ('--- a/pkg/mod.py\t2026-11-29 21:14:26\n+++ b/pkg/mod.py\t2026-11-29 21:14:27\n'
        '@@ -1 +1 @@\n-x = 1\n+x = 2\n'
        '--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-y = 1\n+y = 2\n')


def test_targets_are_stripped_and_unique():
    assert patching.parse_targets(DIFF + DIFF, 1) == ['pkg/mod.py', 'pkg/other.py']


@pytest.mark.parametrize('text, message', [
    ('', 'no hunks'),
    ('just words\n', 'no hunks'),
    ('@@ -1 +1 @@\n-a\n+b\n', 'hunk before any'),
    ('--- a/../x.py\n+++ b/../x.py\n@@ -1 +1 @@\n-a\n+b\n', 'escapes'),
    ('--- /etc/x\n+++ /etc/x\n@@ -1 +1 @@\n-a\n+b\n', 'absolute'),
    ('--- a/x.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+b\n', 'renames'),
    ('--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n', 'creates or deletes'),
    ('diff --git a/x b/x\nnew file mode 100644\n', 'unsupported diff feature'),
    ('--- "a/x y.py"\n+++ "b/x y.py"\n@@ -1 +1 @@\n-a\n+b\n', 'quoted'),
])
def test_refused_diffs(text, message):
    with pytest.raises(patching.DiffError, match=message):
        patching.parse_targets(text, 1)


def test_confine_rejects_links_out_of_the_tree(tmp_path):
    tree = tmp_path / 'site'
    (tree / 'pkg').mkdir(parents=True)
    (tmp_path / 'outside.py').write_text('x = 1\n')
    os.symlink(str(tmp_path / 'outside.py'), str(tree / 'pkg' / 'mod.py'))
    with pytest.raises(patching.DiffError, match='outside'):
        patching.confine(str(tree), ['pkg/mod.py'])
    with pytest.raises(patching.DiffError, match='does not exist'):
        patching.confine(str(tree), ['pkg/missing.py'])


def test_patch_argv_is_strict():
    argv = patching.PatchCommand('/usr/bin/patch').apply('/stage', '/tmp/c.diff', 1, reverse=True, dry_run=True)
    assert argv[:5] == ['/usr/bin/patch', '--batch', '--forward', '--unified', '--fuzz=0']
    assert '--directory=/stage' in argv and '--input=/tmp/c.diff' in argv and '--strip=1' in argv
    assert argv[-2:] == ['--reverse', '--dry-run']


def make_tree(tmp_path):
    tree = tmp_path / 'site'
    (tree / 'pkg').mkdir(parents=True)
    (tree / 'pkg' / 'mod.py').write_text('x = 1\n')
    (tree / 'pkg' / 'other.py').write_text('y = 1\n')
    os.chmod(str(tree / 'pkg' / 'mod.py'), 0o640)
    staging = tmp_path / 'staging'
    staging.mkdir()
    return tree, patching.PatchTransaction(str(tree), ['pkg/mod.py', 'pkg/other.py'], str(staging))


def test_commit_replaces_every_file_keeping_mode(tmp_path):
    tree, txn = make_tree(tmp_path)
    for rel, text in (('pkg/mod.py', 'x = 2\n'), ('pkg/other.py', 'y = 2\n')):
        with open(txn.staged_path(rel), 'w') as handle:
            handle.write(text)
    assert txn.changed_files() == ['pkg/mod.py', 'pkg/other.py']
    txn.commit(txn.changed_files())
    assert (tree / 'pkg' / 'mod.py').read_text() == 'x = 2\n'
    assert (tree / 'pkg' / 'other.py').read_text() == 'y = 2\n'
    assert oct(os.stat(str(tree / 'pkg' / 'mod.py')).st_mode & 0o777) == oct(0o640)
    assert sorted(os.listdir(str(tree / 'pkg'))) == ['mod.py', 'other.py']


def test_failed_rename_restores_every_original(tmp_path, monkeypatch):
    tree, txn = make_tree(tmp_path)
    for rel in txn.relative_paths:
        with open(txn.staged_path(rel), 'w') as handle:
            handle.write('changed = True\n')
    real_rename = os.rename
    calls = []

    def rename_failing_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, 'No space left on device')
        return real_rename(src, dst)
    monkeypatch.setattr(patching.os, 'rename', rename_failing_second)
    with pytest.raises(OSError):
        txn.commit(txn.relative_paths)
    monkeypatch.setattr(patching.os, 'rename', real_rename)
    assert (tree / 'pkg' / 'mod.py').read_text() == 'x = 1\n'
    assert (tree / 'pkg' / 'other.py').read_text() == 'y = 1\n'
    assert sorted(os.listdir(str(tree / 'pkg'))) == ['mod.py', 'other.py']


def test_dist_version_read_without_import(tmp_path):
    info = tmp_path / 'sglang-0.5.12.post1.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.4\nName: sglang\nVersion: 0.5.12.post1\n\nbody\n')
    assert patching.read_dist_version(str(tmp_path)) == '0.5.12.post1'
    assert patching.read_dist_version(str(tmp_path / 'none')) is None
