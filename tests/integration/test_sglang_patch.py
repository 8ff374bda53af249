"""sglang_patch against a real sglang release installed with pip --no-deps."""
import fcntl
import hashlib
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.modules import sglang_patch
from helpers.ansible_run import REPO, module_process_result, run_task, start_module_process

PATCH = os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff')
WORKER = 'sglang/srt/speculative/eagle_worker.py'
KEYS = {'changed', 'site_packages', 'sglang_version', 'files', 'patch_sha256', 'state', 'applied',
        'backup_files', 'recovered', 'cmd'}


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    assert set(result) >= KEYS
    assert tree_digest(site) == before


def test_python_without_sglang_is_a_clear_failure(tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': '/usr/bin/python3'})
    assert result.failed and 'cannot find the sglang package' in result['msg'] and set(result) >= KEYS


@pytest.mark.slow
def test_a_program_that_is_not_python_is_a_clear_failure(tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': '/bin/true'})
    assert result.failed and set(result) >= KEYS
    assert "/bin/true exited 0 but printed no site-packages path" in result['msg']


def example_tasks():
    return yaml.safe_load(sglang_patch.EXAMPLES)


@pytest.mark.slow
def test_the_lookup_example_works_as_written(tmp_path, sglang_venv):
    """EXAMPLES' content: lookup(...) task, with only the interpreter path pointed at the test venv."""
    python, site = sglang_venv
    example = [task for task in example_tasks() if 'content' in task['gpuops.sglang.sglang_patch']][0]
    args = dict(example['gpuops.sglang.sglang_patch'], python=python)
    assert args['content'] == "{{ lookup('ansible.builtin.file', 'eagle_dynamic_spec.diff') }}"
    files = {'eagle_dynamic_spec.diff': diff_text()}
    keywords = dict((key, value) for key, value in example.items() if key not in ('name', 'gpuops.sglang.sglang_patch'))
    assert keywords == {'check_mode': True, 'diff': True}
    checked = run_task(tmp_path, 'gpuops.sglang.sglang_patch', args, keywords=keywords, files=files, name='example')
    assert not checked.failed, checked['msg']
    assert checked['changed'] is True and checked['patch_sha256'] == hashlib.sha256(diff_text().encode()).hexdigest()
    applied = run_task(tmp_path, 'gpuops.sglang.sglang_patch', args, files=files, name='example-real')
    assert not applied.failed, applied['msg']
    assert 'def should_skip_draft' in read(site)


@pytest.mark.slow
def test_sglang_is_found_by_the_interpreter_not_by_the_folder_or_pythonpath(tmp_path, sglang_venv):
    python, site = sglang_venv
    decoy = tmp_path / 'runner-decoy' / 'project'
    (decoy / 'sglang').mkdir(parents=True)
    (decoy / 'sglang' / '__init__.py').write_text('')
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python},
                      keywords={'environment': {'PYTHONPATH': str(decoy)}}, check=True, name='decoy')
    assert not result.failed, result['msg']
    assert result['site_packages'] == os.path.realpath(site)
    assert result['cmd'][0][:2] == [python, '-I']


def hold_package_lock(site):
    holder = os.open(os.path.join(site, 'sglang'), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    return holder


@pytest.mark.slow
def test_a_run_waits_for_the_lock_at_most_lock_timeout(tmp_path, sglang_venv):
    python, site = sglang_venv
    before = tree_digest(site)
    holder = hold_package_lock(site)
    try:
        result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python, 'lock_timeout': 0})
    finally:
        os.close(holder)
    assert result.failed and set(result) >= KEYS
    assert 'another sglang_patch run is changing this package' in result['msg'] and 'nothing was changed' in result['msg']
    assert tree_digest(site) == before


def one_line_diff(site, line_number, suffix):
    lines = read(site).splitlines()
    old = lines[line_number - 1]
    return '--- a/{rel}\n+++ b/{rel}\n@@ -{n} +{n} @@\n-{old}\n+{old}{suffix}\n'.format(
        rel=WORKER, n=line_number, old=old, suffix=suffix)


def test_concurrent_runs_with_different_patches_keep_both_changes(tmp_path, sglang_venv):
    python, site = sglang_venv
    lines = read(site).splitlines()
    first = [n for n, line in enumerate(lines, 1) if line.startswith('import ')][0]
    last = [n for n, line in enumerate(lines, 1) if line.startswith('logger = ')][0]
    diffs = [one_line_diff(site, first, '  # run one'), one_line_diff(site, last, '  # run two')]
    runs = [start_module_process(tmp_path, 'sglang_patch', {'content': diff, 'python': python}, name='run%d' % i)
            for i, diff in enumerate(diffs)]
    results = [module_process_result(run) for run in runs]
    assert all(not result.get('failed') and result['changed'] for result in results), results
    text = read(site)
    assert '  # run one' in text and '  # run two' in text


def crash_mid_commit(site, diff):
    """Apply diff with the module's own transaction in a process SIGKILLed between two renames."""
    script = r'''
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _patching as patching
site, diff_path = sys.argv[1], sys.argv[2]
data = open(diff_path, 'rb').read()
targets = patching.parse_targets(patching.diff_text(data), 1)
real = patching.confine(site, targets)
staging = sys.argv[4]
tx = patching.PatchTransaction(site, targets, staging, real_targets=real,
                               journal=patching.Journal(os.path.join(site, 'sglang')))
import subprocess
subprocess.check_call(['patch', '--batch', '-p1', '-d', tx.staging_tree(), '-i', diff_path], stdout=subprocess.DEVNULL)
renames = []
real_rename = os.rename
def rename(src, dst):
    renames.append(dst)
    # 1: the journal, 2: the first target; die before the second target is replaced
    if len(renames) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    real_rename(src, dst)
os.rename = rename
tx.commit(targets)
'''
    diff_path = os.path.join(os.path.dirname(site), 'crash.diff')
    with open(diff_path, 'w') as handle:
        handle.write(diff)
    staging = os.path.join(os.path.dirname(site), 'crash-staging')
    os.mkdir(staging)
    run = subprocess.run([sys.executable, '-c', script, site, diff_path, os.path.join(REPO, '.cache', 'collections'),
                          staging])
    assert run.returncode == -9


def temp_files(site):
    return sorted(os.path.join(root, name) for root, _, names in os.walk(site) for name in names
                  if '.sglang_patch.' in name)


@pytest.mark.slow
@pytest.mark.parametrize('state', ['present', 'absent'])
def test_a_run_after_a_crash_mid_commit_repairs_the_tree_first(tmp_path, sglang_venv, state):
    python, site = sglang_venv
    two_files = other_file_diff(site) + diff_text()
    originals = {rel: read(site, rel) for rel in ('sglang/version.py', WORKER)}
    crash_mid_commit(site, two_files)
    assert read(site, 'sglang/version.py') != originals['sglang/version.py']
    assert read(site) == originals[WORKER]
    assert temp_files(site), 'the crash left no journal or temp files to recover'

    before = tree_digest(site)
    checked = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'content': two_files, 'python': python, 'state': state},
                       check=True, name='check')
    assert not checked.failed, checked['msg']
    assert checked['changed'] is True and any('would restore' in line for line in checked['recovered'])
    assert tree_digest(site) == before

    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'content': two_files, 'python': python, 'state': state})
    assert not result.failed, result['msg']
    assert result['changed'] is True and any('undone' in line for line in result['recovered'])
    assert temp_files(site) == []
    if state == 'present':
        assert 'def should_skip_draft' in read(site), result
        assert read(site, 'sglang/version.py').splitlines()[0].endswith('  # patched')
    else:
        assert {rel: read(site, rel) for rel in originals} == originals


@pytest.mark.slow
def test_a_symlinked_target_is_patched_in_its_real_file(tmp_path, sglang_venv):
    python, site = sglang_venv
    worker = os.path.join(site, WORKER)
    real = os.path.join(os.path.dirname(worker), 'eagle_worker_real.py')
    os.rename(worker, real)
    os.symlink('eagle_worker_real.py', worker)
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python})
    assert not result.failed, result['msg']
    assert os.path.islink(worker) and os.readlink(worker) == 'eagle_worker_real.py'
    with open(real) as handle:
        assert 'def should_skip_draft' in handle.read()


@pytest.mark.slow
def test_a_git_mode_change_is_refused_clearly(tmp_path, sglang_venv):
    python, site = sglang_venv
    before = tree_digest(site)
    diff = 'diff --git a/{0} b/{0}\nold mode 100644\nnew mode 100755\n'.format(WORKER) + diff_text()
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'content': diff, 'python': python})
    assert result.failed and 'changes a file mode' in result['msg'] and set(result) >= KEYS
    assert tree_digest(site) == before


def latin1_diff(site, rel):
    first = read(site, rel).splitlines()[0]
    return ('--- a/{rel}\n+++ b/{rel}\n@@ -1 +1 @@\n-{first}\n+{first} caf\xe9\n'
            .format(rel=rel, first=first).encode('latin-1'))


@pytest.mark.slow
def test_a_latin1_diff_applies_byte_for_byte_and_reverts(tmp_path, sglang_venv):
    python, site = sglang_venv
    original = open(os.path.join(site, 'sglang/README.md'), 'rb').read()
    diff_file = tmp_path / 'latin1.diff'
    diff_file.write_bytes(latin1_diff(site, 'sglang/README.md'))
    applied = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': str(diff_file), 'python': python}, name='apply')
    assert not applied.failed, applied['msg']
    assert applied['patch_sha256'] == hashlib.sha256(diff_file.read_bytes()).hexdigest()
    assert open(os.path.join(site, 'sglang/README.md'), 'rb').read().splitlines()[0].endswith(b' caf\xe9')
    reverted = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': str(diff_file), 'python': python,
                                                                'state': 'absent'}, name='revert')
    assert not reverted.failed and reverted['changed'] is True
    assert open(os.path.join(site, 'sglang/README.md'), 'rb').read() == original


@pytest.mark.slow
def test_a_latin1_diff_to_python_source_is_refused_clearly(tmp_path, sglang_venv):
    python, site = sglang_venv
    before = tree_digest(site)
    diff_file = tmp_path / 'latin1-py.diff'
    # Python 3.11 lets a stray byte pass in a comment, not in a string literal.
    lines = read(site, 'sglang/version.py').splitlines()
    number = [n for n, line in enumerate(lines, 1) if '__version__ = "0.0.0.dev0"' in line][0]
    old = lines[number - 1]
    diff_file.write_bytes(('--- a/sglang/version.py\n+++ b/sglang/version.py\n@@ -{n} +{n} @@\n-{old}\n+{new}\n'
                           .format(n=number, old=old, new=old.replace('dev0"', 'dev0 caf\xe9"'))).encode('latin-1'))
    result = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': str(diff_file), 'python': python})
    assert result.failed and 'do not compile' in result['msg'] and 'the diff is not UTF-8' in result['msg']
    assert tree_digest(site) == before


def stamp_proves(tmp_path, python, stamp, name, content=None):
    """sglang_server_info's answer about the patch, for a host where no server runs."""
    info = run_task(tmp_path, 'gpuops.sglang.sglang_server_info', {
        'manager': 'detached', 'launch_file': str(tmp_path / 'launch.json'),
        'pidfile': str(tmp_path / 'none.pid'), 'url': 'http://127.0.0.1:9', 'python': python,
        'patch_content': diff_text() if content is None else content, 'patch_stamp': stamp}, name=name)
    assert not info.failed, info['msg']
    return info['patch']


@pytest.mark.slow
def test_a_stamp_proves_the_patch_applied_until_a_patched_file_changes(tmp_path, sglang_venv):
    python, site = sglang_venv
    stamp = str(tmp_path / 'patch.stamp.json')
    assert stamp_proves(tmp_path, python, stamp, 'none')['proven'] is False

    # check mode writes no stamp; a real apply does, outside site-packages
    checked = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python, 'stamp': stamp},
                       check=True, name='check')
    assert not checked.failed and not os.path.exists(stamp)
    before = tree_digest(site)
    applied = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python, 'stamp': stamp},
                       name='apply')
    assert not applied.failed and applied['changed'] is True
    assert tree_digest(site) != before
    patch = stamp_proves(tmp_path, python, stamp, 'proven')
    assert patch == {'proven': True, 'why': None, 'patch_sha256': applied['patch_sha256'],
                     'site_packages': applied['site_packages'], 'files': [WORKER], 'sglang_version': '0.5.12.post1'}

    # the stamp is no marker: another patch, another interpreter or other bytes in a patched file prove nothing
    assert stamp_proves(tmp_path, python, stamp, 'other', content=diff_text() + '\n')['proven'] is False
    assert stamp_proves(tmp_path, sys.executable, stamp, 'interp')['proven'] is False
    worker = os.path.join(site, WORKER)
    with open(worker, 'a') as handle:
        handle.write('# edited by hand\n')
    edited = stamp_proves(tmp_path, python, stamp, 'edited')
    assert edited['proven'] is False and 'changed since the patch was applied' in edited['why']

    # reverting removes the stamp; applying again over the reverted tree writes it again
    with open(worker) as handle:
        text = handle.read()
    with open(worker, 'w') as handle:
        handle.write(text.replace('# edited by hand\n', ''))
    reverted = run_task(tmp_path, 'gpuops.sglang.sglang_patch',
                        {'src': PATCH, 'python': python, 'state': 'absent', 'stamp': stamp}, name='revert')
    assert not reverted.failed and reverted['changed'] is True and not os.path.exists(stamp)
    again = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python, 'stamp': stamp},
                     name='again')
    assert not again.failed and stamp_proves(tmp_path, python, stamp, 'again')['proven'] is True
    # an already applied patch (changed=false) writes the stamp too
    os.unlink(stamp)
    idle = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python, 'stamp': stamp},
                    name='idle')
    assert not idle.failed and idle['changed'] is False
    assert stamp_proves(tmp_path, python, stamp, 'idle')['proven'] is True


@pytest.mark.slow
def test_the_installed_sglang_says_whether_it_reads_adaptive_tiers(tmp_path, sglang_venv):
    python, site = sglang_venv
    info = run_task(tmp_path, 'gpuops.sglang.sglang_server_info', {
        'manager': 'detached', 'launch_file': str(tmp_path / 'launch.json'),
        'pidfile': str(tmp_path / 'none.pid'), 'url': 'http://127.0.0.1:9', 'python': python,
        'check_adaptive_tiers': True}, name='tiers')
    # 0.5.12.post1 reads one flat candidate_steps list: batch-size tiers would be ignored
    assert not info.failed and info['adaptive_tiers'] is False
    assert info['cmd'][-1][:2] == [python, '-I']
    unasked = run_task(tmp_path, 'gpuops.sglang.sglang_server_info', {
        'manager': 'detached', 'launch_file': str(tmp_path / 'launch.json'),
        'pidfile': str(tmp_path / 'none.pid'), 'url': 'http://127.0.0.1:9', 'python': python}, name='unasked')
    assert unasked['adaptive_tiers'] is None
