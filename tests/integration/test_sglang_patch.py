"""sglang_patch against a real sglang release installed with pip --no-deps."""
import hashlib
import os
import subprocess

import pytest

from helpers.ansible_run import REPO, run_task

PATCH = os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff')
WORKER = 'sglang/srt/speculative/eagle_worker.py'
KEYS = {'changed', 'site_packages', 'sglang_version', 'files', 'patch_sha256', 'state', 'applied',
        'backup_files', 'cmd'}


def tree_digest(site):
    """Hash of every path and byte under site-packages (pycache included)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(site):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, site).encode())
            with open(path, 'rb') as handle:
                digest.update(handle.read())
    return digest.hexdigest()


def read(site, rel=WORKER):
    with open(os.path.join(site, rel)) as handle:
        return handle.read()


def diff_text():
    with open(PATCH) as handle:
        return handle.read()


def test_check_real_idempotent_then_revert(tmp_path, sglang_venv):
    python, site = sglang_venv
    original = read(site)
    before = tree_digest(site)

    checked = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python},
                       check=True, diff=True, name='check')
    assert not checked.failed, checked['msg']
    assert checked['changed'] is True and checked['applied'] is True
    assert set(checked) >= KEYS
    assert checked['diff'][0]['before_header'].startswith(WORKER)
    assert 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE' in checked['diff'][0]['after']
    assert tree_digest(site) == before, 'check mode wrote to site-packages'

    applied = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python}, name='apply')
    assert not applied.failed, applied['msg']
    assert applied['changed'] is True
    assert applied['site_packages'] == os.path.realpath(site)
    assert applied['sglang_version'] == '0.5.12.post1'
    assert applied['files'] == [WORKER]
    assert applied['patch_sha256'] == hashlib.sha256(diff_text().encode()).hexdigest()
    assert 'def should_skip_draft' in read(site)
    # byte-compiled in place with the server's interpreter
    pycache = os.path.join(site, 'sglang/srt/speculative/__pycache__')
    assert any(name.startswith('eagle_worker.') for name in os.listdir(pycache))
    assert not [name for name in os.listdir(os.path.dirname(os.path.join(site, WORKER)))
                if name.endswith('.sglang_patch.tmp')]

    again = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python}, name='again')
    assert not again.failed and again['changed'] is False and again['applied'] is True

    reverted = run_task(tmp_path, 'gpuops.sglang.sglang_patch',
                        {'src': PATCH, 'site_packages': site, 'state': 'absent'}, name='revert')
    assert not reverted.failed and reverted['changed'] is True and reverted['applied'] is False
    assert read(site) == original

    absent_again = run_task(tmp_path, 'gpuops.sglang.sglang_patch',
                            {'content': diff_text(), 'site_packages': site, 'state': 'absent'}, name='absent2')
    assert not absent_again.failed and absent_again['changed'] is False


def test_backup_keeps_the_original(tmp_path, sglang_venv):
    python, site = sglang_venv
    original = read(site)
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python, 'backup': True})
    assert not result.failed and len(result['backup_files']) == 1
    with open(result['backup_files'][0]) as handle:
        assert handle.read() == original


def worker_hunk_diff(old, new, rel=WORKER):
    return ('--- a/{rel}\n+++ b/{rel}\n@@ -1,2 +1,2 @@\n-{old}\n+{new}\n import time\n'
            .format(rel=rel, old=old, new=new))


def other_file_diff(site):
    rel = 'sglang/version.py'
    first = read(site, rel).splitlines()[0]
    return '--- a/{rel}\n+++ b/{rel}\n@@ -1 +1 @@\n-{first}\n+{first}  # patched\n'.format(rel=rel, first=first)


REFUSALS = {
    'empty': (lambda site: '', 'no hunks'),
    'escape': (lambda site: worker_hunk_diff('import logging', 'import logging  # x',
                                             rel='../../../etc/passwd'), 'escapes the target tree'),
    'absolute': (lambda site: '--- /etc/hosts\n+++ /etc/hosts\n@@ -1 +1 @@\n-a\n+b\n', 'absolute path'),
    'missing-target': (lambda site: worker_hunk_diff('a', 'b', rel='sglang/srt/no_such_file.py'),
                       'does not exist'),
    'creates-file': (lambda site: '--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1 @@\n+x = 1\n',
                     'creates or deletes'),
    'wrong-version': (lambda site: worker_hunk_diff('import logging_v2', 'import logging_v3'),
                      'applies neither forwards nor backwards'),
    'partly-applied': (lambda site: other_file_diff(site) + diff_text(), 'applies neither forwards nor backwards'),
    'breaks-syntax': (lambda site: worker_hunk_diff('import logging', 'import logging ) ('),
                      'do not compile'),
}


@pytest.mark.parametrize('case', sorted(REFUSALS))
def test_refused_diff_leaves_site_packages_byte_identical(tmp_path, sglang_venv, case):
    python, site = sglang_venv
    make_diff, message = REFUSALS[case]
    text = make_diff(site)
    if case == 'partly-applied':
        subprocess.check_call(['patch', '--batch', '-p1', '-d', site, '-i', PATCH], stdout=subprocess.DEVNULL)
    before = tree_digest(site)
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'content': text, 'python': python}, name=case)
    assert result.failed
    assert message in result['msg'], result['msg']
    assert 'nothing was changed' in result['msg']
    assert set(result) >= KEYS - {'changed'}
    assert tree_digest(site) == before


def test_python_without_sglang_is_a_clear_failure(tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': '/usr/bin/python3'})
    assert result.failed and 'cannot find the sglang package' in result['msg']
