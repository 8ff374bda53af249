import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _patching as patching

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


# --- issue 11: newline, modes, encodings, symlinks, lock, journal ------------------------------

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _patching as patching  # noqa: E402

TWO_LINE = b'--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1,3 +1,3 @@\n-x = 1\n+x = 2\n y = 3\n \n'


def test_final_newline_and_stripped_blank_context_lines_come_back():
    assert patching.restore_final_newline(TWO_LINE.rstrip()) == TWO_LINE
    assert patching.restore_final_newline(TWO_LINE) == TWO_LINE
    crlf = TWO_LINE.replace(b'\n', b'\r\n')
    assert patching.restore_final_newline(crlf.rstrip()) == crlf


def test_git_mode_change_is_refused_clearly():
    diff = 'diff --git a/pkg/m.py b/pkg/m.py\nold mode 100644\nnew mode 100755\n' + TWO_LINE.decode()
    with pytest.raises(patching.DiffError, match='changes a file mode'):
        patching.parse_targets(diff, 1)


def test_non_utf8_hunks_parse_and_a_non_utf8_file_name_is_refused():
    latin1 = '--- a/pkg/README.md\n+++ b/pkg/README.md\n@@ -1 +1 @@\n-caf\n+caf\xe9\n'.encode('latin-1')
    assert patching.parse_targets(patching.diff_text(latin1), 1) == ['pkg/README.md']
    assert not patching.is_utf8(latin1)
    assert patching.sha256_bytes(latin1) == patching.sha256_text(patching.diff_text(latin1))
    bad_name = b'--- a/pkg/\xe9.py\n+++ b/pkg/\xe9.py\n@@ -1 +1 @@\n-a\n+b\n'
    with pytest.raises(patching.DiffError, match='not UTF-8'):
        patching.parse_targets(patching.diff_text(bad_name), 1)


def test_symlinked_target_resolves_to_its_real_file_and_two_names_for_one_file_are_refused(tmp_path):
    (tmp_path / 'pkg').mkdir()
    (tmp_path / 'pkg' / 'real.py').write_text('x = 1\n')
    (tmp_path / 'pkg' / 'link.py').symlink_to('real.py')
    assert patching.confine(str(tmp_path), ['pkg/link.py']) == [str(tmp_path / 'pkg' / 'real.py')]
    with pytest.raises(patching.DiffError, match='same file'):
        patching.confine(str(tmp_path), ['pkg/link.py', 'pkg/real.py'])


def test_lock_held_elsewhere_times_out_with_a_clear_message(tmp_path):
    import fcntl
    holder = os.open(str(tmp_path), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with pytest.raises(patching.LockTimeout, match='another sglang_patch run is changing this package'):
            patching.PackageLock(str(tmp_path), 0).acquire()
    finally:
        os.close(holder)
    lock = patching.PackageLock(str(tmp_path), 0).acquire()
    lock.release()


def interrupted_commit(tmp_path, state):
    """A tree as a run killed mid-commit leaves it: pkg/a.py replaced, pkg/b.py not yet."""
    pkg = tmp_path / 'pkg'
    pkg.mkdir()
    entries = []
    for name, now in (('a.py', 'new a\n'), ('b.py', 'old b\n')):
        target = pkg / name
        target.write_text(now)
        orig = patching.write_beside(str(target), ('old %s\n' % name[0]).encode(), patching.ORIG_SUFFIX)
        new = None if name == 'a.py' else patching.write_beside(str(target), b'new b\n', patching.TEMP_SUFFIX)
        entries.append({'target': str(target), 'orig': orig, 'new': new or str(target) + '.gone'})
    journal = patching.Journal(str(pkg))
    journal.write(state, entries)
    return pkg, journal


def test_recovery_undoes_a_commit_interrupted_between_renames(tmp_path):
    pkg, journal = interrupted_commit(tmp_path, 'committing')
    state, sources = journal.plan()
    assert state == 'committing' and sorted(sources) == [str(pkg / 'a.py'), str(pkg / 'b.py')]
    done = journal.recover()
    assert (pkg / 'a.py').read_text() == 'old a\n' and (pkg / 'b.py').read_text() == 'old b\n'
    assert sorted(os.listdir(str(pkg))) == ['a.py', 'b.py']
    assert any('undone' in line for line in done)


def test_recovery_finishes_a_commit_interrupted_while_cleaning_up(tmp_path):
    pkg, journal = interrupted_commit(tmp_path, 'committed')
    (pkg / 'b.py').write_text('new b\n')
    journal.recover()
    assert (pkg / 'a.py').read_text() == 'new a\n' and (pkg / 'b.py').read_text() == 'new b\n'
    assert sorted(os.listdir(str(pkg))) == ['a.py', 'b.py']


def test_stray_temp_files_beside_targets_are_found(tmp_path):
    target = tmp_path / 'm.py'
    target.write_text('x\n')
    stray = patching.write_beside(str(target), b'y\n', patching.TEMP_SUFFIX)
    (tmp_path / 'unrelated.tmp').write_text('')
    assert patching.stray_temp_files([str(target)]) == [stray]


@pytest.mark.parametrize('source, expected', [
    # a release with batch-size tiers (0.5.23 defines _load_adaptive_config for integer-string keys)
    ('def resolve_adaptive_strategy(p):\n    pass\n\n\ndef _load_adaptive_config(p):\n    pass\n', True),
    # 0.5.12.post1: one flat candidate_steps list
    ('def load_adaptive_config(path):\n    pass\n\n\nclass AdaptiveSpeculativeParams:\n    pass\n', False),
    (None, False),            # sglang without the file: no adaptive speculation at all
    ('def broken(:\n', None),  # unreadable: cannot be told
])
def test_adaptive_tiers_are_read_from_the_installed_source(tmp_path, source, expected):
    speculative = tmp_path / 'sglang' / 'srt' / 'speculative'
    speculative.mkdir(parents=True)
    if source is not None:
        (speculative / 'adaptive_spec_params.py').write_text(source)
    assert patching.adaptive_tiers_supported(str(tmp_path)) is expected
    assert patching.adaptive_tiers_supported(str(tmp_path / 'elsewhere')) is None
