"""The checkout's ansible.cfg shows changes, failures (each once) and the recap; -v gives the detail back."""
import json
import os
import subprocess
import sys

import pytest

from helpers.ansible_run import ANSIBLE_ENV, TARGET_PYTHON

REFUSAL = 'the diff contains no hunks'
PLAY = [{
    'hosts': 'all', 'gather_facts': False,
    'tasks': [
        {'name': 'an ok task', 'ansible.builtin.debug': {'msg': 'quiet ok result'}},
        {'name': 'a skipped task', 'ansible.builtin.debug': {'msg': 'never'}, 'when': False},
        {'name': 'a changing task', 'ansible.builtin.command': 'true'},
        {'name': 'the window', 'block': [
            {'name': 'a refused patch', 'gpuops.sglang.sglang_patch': {'content': '', 'site_packages': '/nonexistent'}},
        ], 'rescue': [
            {'name': 'the rollback', 'ansible.builtin.command': 'true'},
        ]},
        {'name': 'a failing command', 'ansible.builtin.command': 'ls /nonexistent-gpuops-path'},
    ],
}]


def run_play(tmp_path, *flags):
    (tmp_path / 'play.yml').write_text(json.dumps(PLAY))
    env = {key: value for key, value in os.environ.items() if not key.startswith('ANSIBLE_')}
    env.update(ANSIBLE_ENV)
    run = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'alpha,beta,',
                          '-c', 'local', '-e', 'ansible_python_interpreter=%s' % TARGET_PYTHON]
                         + list(flags) + [str(tmp_path / 'play.yml')],
                         cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=300)
    assert run.returncode == 2, run.stdout
    return run.stdout


@pytest.fixture(scope='module')
def quiet(tmp_path_factory):
    return run_play(tmp_path_factory.mktemp('quiet'))


def test_default_display_hides_ok_and_skipped_results(quiet):
    assert 'quiet ok result' not in quiet and 'ok: [' not in quiet and 'skipping: [' not in quiet
    assert 'TASK [an ok task]' not in quiet and 'TASK [a skipped task]' not in quiet


def test_default_display_shows_changes_and_the_recap_per_host(quiet):
    assert quiet.count('changed: [alpha]') == 2 and quiet.count('changed: [beta]') == 2
    recap = quiet.split('PLAY RECAP')[1].strip().splitlines()[1:]
    assert [line.split()[0] for line in recap] == ['alpha', 'beta']
    assert all('rescued=1' in line and 'failed=1' in line for line in recap)


def test_default_display_says_each_failure_once_per_host(quiet):
    assert '[ERROR]' not in quiet
    assert quiet.count(REFUSAL) == 2, quiet
    assert 'fatal: [alpha]: FAILED! => refusing the diff' in quiet
    # a failed command says what the command said, once
    assert quiet.count('nonexistent-gpuops-path') == 2, quiet
    assert quiet.count('task path:') == 2


def test_verbose_display_gives_the_detail_back(tmp_path):
    verbose = run_play(tmp_path, '-v')
    assert 'quiet ok result' in verbose and 'skipping: [alpha]' in verbose
    # the whole failed result, with the keys the module returns every run
    assert 'patch_sha256' in verbose and 'site_packages' in verbose
