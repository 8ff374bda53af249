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
        {'name': 'a task file', 'ansible.builtin.include_tasks': 'steps.yml'},
        {'name': 'a changing loop', 'ansible.builtin.command': 'echo {{ item }}', 'loop': ['first', 'second']},
        {'name': 'the report', 'gpuops.sglang.sglang_report': {
            'host': '{{ inventory_hostname }}',
            'report': {'status': 'redeployed', 'healthy': True, 'downtime_s': 3.05,
                       'reason': 'the patch changed ({{ inventory_hostname }})'}}},
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
    (tmp_path / 'steps.yml').write_text(json.dumps([{'name': 'an included step', 'ansible.builtin.command': 'true'}]))
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


@pytest.mark.slow
def test_default_display_hides_ok_and_skipped_results(quiet):
    assert 'quiet ok result' not in quiet and 'ok: [' not in quiet and 'skipping: [' not in quiet
    assert 'TASK [an ok task]' not in quiet and 'TASK [a skipped task]' not in quiet


def test_default_display_shows_each_change_as_one_line_naming_its_task(quiet):
    for host in ('alpha', 'beta'):
        assert quiet.count('changed: [%s]' % host) == 5, quiet
        for task in ('a changing task', 'an included step', 'a changing loop (item=first)',
                     'a changing loop (item=second)', 'the rollback'):
            assert quiet.count('changed: [%s] %s\n' % (host, task)) == 1, quiet
    # no banner for a task that only changed, no included: line
    assert 'TASK [a changing task]' not in quiet and 'TASK [an included step]' not in quiet
    assert 'included:' not in quiet


def test_default_display_ends_with_one_summary_line_per_host_then_the_recap(quiet):
    summary = quiet.split('REDEPLOY SUMMARY')[1].split('PLAY RECAP')[0].strip().splitlines()[1:]
    assert summary == ['alpha: redeployed, healthy, downtime 3.05 s: the patch changed (alpha)',
                       'beta: redeployed, healthy, downtime 3.05 s: the patch changed (beta)']


def test_default_display_shows_changes_and_the_recap_per_host(quiet):
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


@pytest.mark.slow
def test_verbose_display_gives_the_detail_back(tmp_path):
    verbose = run_play(tmp_path, '-v')
    assert 'quiet ok result' in verbose and 'skipping: [alpha]' in verbose
    # the banners and the included: lines come back
    assert 'TASK [a changing task]' in verbose and 'TASK [an included step]' in verbose
    assert verbose.count('included: %s' % (tmp_path / 'steps.yml')) == 1
    # the whole failed result, with the keys the module returns every run
    assert 'patch_sha256' in verbose and 'site_packages' in verbose
