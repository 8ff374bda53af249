"""The commands docs/testing.md documents for a checkout work as written, from the repository root."""
import os
import re
import subprocess

from helpers.ansible_run import REPO

# The block that follows this sentence of docs/testing.md is run line by line, exactly as a user would paste it.
README_ANCHOR = 'so these work from the root:'


def readme_block(anchor):
    with open(os.path.join(REPO, 'docs', 'testing.md')) as readme:
        text = readme.read()
    block = re.search(re.escape(anchor) + r'\s*```sh\n(.*?)```', text, re.S)
    assert block, 'docs/testing.md no longer has a sh block after %r' % anchor
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith('#')]


def user_shell_env():
    """A user's shell in the checkout: none of the variables the Makefile or the tests set for Ansible."""
    return {key: value for key, value in os.environ.items() if not key.startswith('ANSIBLE_')}


def run_as_written(command):
    return subprocess.run(['bash', '-c', command], cwd=REPO, env=user_shell_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)


def test_readme_checkout_commands_reach_the_modules():
    commands = readme_block(README_ANCHOR)
    assert [command.split()[0] for command in commands] == ['.venv/bin/ansible-doc', '.venv/bin/ansible']
    doc = run_as_written(commands[0])
    assert doc.returncode == 0, doc.stdout
    assert 'gpuops.sglang.gpu_release' in doc.stdout and 'max_used_mib' in doc.stdout
    adhoc = run_as_written(commands[1])
    assert 'is undefined' not in adhoc.stdout, adhoc.stdout
    # gpu_release itself answers: released where the NVIDIA driver is loaded, refused with its reason elsewhere.
    has_driver = any(name.startswith('nvidia') for name in os.listdir('/dev'))
    if has_driver:
        assert adhoc.returncode == 0, adhoc.stdout
        assert 'gpus_before' in adhoc.stdout
    else:
        assert adhoc.returncode == 2, adhoc.stdout
        assert 'match no file: is the NVIDIA driver loaded' in adhoc.stdout, adhoc.stdout


def ssh_command_for(inventory, host):
    """The ssh argv Ansible builds for `host` of `inventory` with the checkout's ansible.cfg (port 9: refused)."""
    run = subprocess.run([os.path.join(REPO, '.venv', 'bin', 'ansible'), '-i', inventory, host, '-m', 'ping',
                          '-e', 'ansible_port=9 ansible_host=127.0.0.1 ansible_user=nobody', '-vvv'],
                         cwd=REPO, env=user_shell_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=120)
    execs = [line for line in run.stdout.splitlines() if 'SSH: EXEC ssh' in line]
    assert execs, run.stdout
    return execs[0]


def test_host_key_checking_stays_on_outside_the_lab_inventory():
    assert 'StrictHostKeyChecking=no' not in ssh_command_for('example-host,', 'example-host')


def test_the_lab_inventory_turns_host_key_checking_off_for_its_hosts():
    assert 'StrictHostKeyChecking=no' in ssh_command_for('inventory/lab', 'pve1')
