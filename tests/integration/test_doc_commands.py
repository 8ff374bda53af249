"""The docs/ pages per use (terminal, ansible-runner, molecule): every shell block is tested, and those that need
no host run here as written (tests/lab/test_doc_commands.py runs those that need the lab)."""
import os
import re

import pytest

import run_stages

from helpers.ansible_run import REPO
from helpers.doc_blocks import PAGES, FENCE, command_lines, doc_block, marked_blocks, run_block

RUN_HERE = {'terminal-production-offline', 'terminal-production', 'molecule-offline', 'in-make-test'}
RUN_IN_THE_LAB_TESTS = {'terminal-lab', 'terminal-adhoc', 'runner-dashboard-check'}


def test_every_shell_block_of_the_pages_is_marked_for_a_test_that_exists():
    for page in PAGES:
        names = [name for name, _ in marked_blocks(page)]
        assert len(names) == len(FENCE.findall(open(os.path.join(REPO, page)).read())), page
        assert set(names) <= RUN_HERE | RUN_IN_THE_LAB_TESTS, page


def test_a_production_inventory_made_from_the_example_lists_its_hosts_before_anything_connects(tmp_path):
    # A scratch checkout: the block's `cp` must not leave an inventory/production in the repository.
    for name in ('.venv', '.cache', 'playbooks'):
        os.symlink(os.path.join(REPO, name), str(tmp_path / name))
    (tmp_path / 'ansible.cfg').write_text(open(os.path.join(REPO, 'ansible.cfg')).read())
    (tmp_path / 'inventory').mkdir()
    os.symlink(os.path.join(REPO, 'inventory', 'example'), str(tmp_path / 'inventory' / 'example'))
    run = run_block('terminal-production-offline', cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout
    assert re.search(r'\|--@gpu:\n(.*\|--(sglang-0[12]|gpu-metal-01)\.example\.internal\n){3}', run.stdout), run.stdout
    assert 'hosts (3):' in run.stdout and 'sglang-01.example.internal' in run.stdout, run.stdout


def test_the_production_runs_are_the_lab_runs_with_the_production_inventory():
    lab_runs = [line for line in command_lines(doc_block('terminal-lab')) if 'ansible-playbook' in line]
    production = command_lines(doc_block('terminal-production'))
    assert production == [line.replace('-i inventory/lab ', '-i inventory/production ') for line in lab_runs]


@pytest.mark.slow
def test_the_molecule_steps_without_the_lab_work_as_written():
    run = run_block('molecule-offline', timeout=120)
    assert run.returncode == 0, run.stdout
    for instance in ('pve1', 'pve2', 'gpu1', 'gpu2'):
        assert re.search(r'^\s*%s\s+.*default' % instance, run.stdout, re.M), run.stdout
    assert 'playbook: %s/molecule/default/converge.yml' % REPO in run.stdout, run.stdout


def test_the_make_targets_the_pages_name_are_run_by_make_test():
    # make test runs tests/run_stages.py, whose stages call the make targets the pages name.
    with open(os.path.join(REPO, 'Makefile')) as handle:
        recipe = re.search(r'^test: .*\n((?:\t.*\n)+)', handle.read(), re.M).group(1)
    assert 'tests/run_stages.py' in recipe
    staged = [stage.argv for stage in run_stages.stages()]
    for line in command_lines(doc_block('in-make-test')):
        target = line.split()[1]
        assert any(argv[-3:] == ['make', '--no-print-directory', target] for argv in staged), \
            '%s is not run by make test' % target


def test_make_test_runs_the_tests_make_test_quick_leaves_out():
    # test-quick deselects the tests marked slow; the stage of make test that runs both suites selects none out.
    stage = next(stage for stage in run_stages.stages() if stage.name == 'unit-integration')
    assert 'tests/integration' in stage.argv and '-m' not in stage.argv and '-k' not in stage.argv
