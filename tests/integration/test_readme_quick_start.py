"""The README's quick start, as written: its inventory has the example's shape, and its commands, run from a
production folder made of its own blocks, reach the hosts they say (--list-hosts: nothing connects)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml

from helpers.ansible_run import REPO
from helpers.doc_blocks import command_lines

MARKED = re.compile(r'<!-- readme: ([\w-]+) -->\n```(\w+)\n(.*?)^```$', re.S | re.M)
GPU_HOSTS = {'sglang-01.example.internal', 'sglang-02.example.internal', 'gpu-metal-01.example.internal'}


def readme_blocks() -> dict[str, str]:
    with open(os.path.join(REPO, 'README.md')) as handle:
        return {name: text for name, _, text in MARKED.findall(handle.read())}


def operator_env(home) -> dict[str, str]:
    """An operator's shell: ansible-core on PATH, none of the checkout's ANSIBLE_* settings, HOME in tmp."""
    env = {key: value for key, value in os.environ.items() if not key.startswith('ANSIBLE_')}
    env.update(HOME=str(home), PATH=os.path.join(REPO, '.venv', 'bin') + os.pathsep + env['PATH'], NO_COLOR='1')
    return env


def run(command, cwd, env):
    return subprocess.run(['bash', '-euo', 'pipefail', '-c', command], cwd=str(cwd), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)


def test_the_readme_is_short_and_every_block_it_marks_is_tested():
    with open(os.path.join(REPO, 'README.md')) as handle:
        assert len(handle.read().splitlines()) <= 200
    assert sorted(readme_blocks()) == ['ansible-cfg', 'encrypt', 'install', 'inventory', 'rollback', 'runs', 'vars',
                                       'vault']


def test_the_quick_start_inventory_has_the_example_groups_and_becomes_root():
    inventory = yaml.safe_load(readme_blocks()['inventory'])['all']
    with open(os.path.join(REPO, 'inventory', 'example', 'hosts.yml')) as handle:
        example = yaml.safe_load(handle)['all']
    assert inventory['children'].keys() == example['children'].keys() == {'proxmox', 'gpu'}
    assert inventory['vars']['ansible_user'] and inventory['vars']['ansible_become'] is True
    for host, values in inventory['children']['gpu']['hosts'].items():
        assert values.get('pve_node') in (None, *inventory['children']['proxmox']['hosts']), host


@pytest.fixture
def production(tmp_path):
    """A controller folder made of the README's blocks only, the vault encrypted as the README says."""
    blocks = readme_blocks()
    gpu_vars = tmp_path / 'inventory' / 'production' / 'group_vars' / 'gpu'
    gpu_vars.mkdir(parents=True)
    (tmp_path / 'inventory' / 'production' / 'hosts.yml').write_text(blocks['inventory'])
    (gpu_vars / 'vars.yml').write_text(blocks['vars'])
    (gpu_vars / 'vault.yml').write_text(blocks['vault'])
    (tmp_path / 'ansible.cfg').write_text(blocks['ansible-cfg'])
    (tmp_path / 'vault-pass').write_text('quick start\n')
    env = operator_env(tmp_path / 'home')
    # The installed collection, as the install block leaves it (tested below); the vault password from a file
    # instead of the prompt the README's operator answers.
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'),
               ANSIBLE_VAULT_PASSWORD_FILE=str(tmp_path / 'vault-pass'))
    encrypted = run(blocks['encrypt'], tmp_path, env)
    assert encrypted.returncode == 0, encrypted.stdout
    assert (gpu_vars / 'vault.yml').read_text().startswith('$ANSIBLE_VAULT;')
    return tmp_path, env


@pytest.mark.parametrize('block, hosts', [
    ('runs', [GPU_HOSTS, {'sglang-01.example.internal'}, GPU_HOSTS]),
    ('rollback', [GPU_HOSTS, {'sglang-01.example.internal'}]),
])
def test_the_quick_start_commands_reach_the_hosts_they_say(production, block, hosts):
    folder, env = production
    commands = command_lines(readme_blocks()[block])
    assert len(commands) == len(hosts)
    for command, wanted in zip(commands, hosts):
        listed = run(command + ' --list-hosts', folder, env)
        assert listed.returncode == 0, listed.stdout
        found = set(re.findall(r'^\s+(\S+\.example\.internal)$', listed.stdout, re.M))
        assert found == wanted, (command, listed.stdout)


@pytest.mark.slow
def test_the_install_block_installs_the_collection_from_a_clone(tmp_path):
    env = operator_env(tmp_path)
    installed = run(readme_blocks()['install'], REPO, env)
    assert installed.returncode == 0, installed.stdout
    collection = tmp_path / '.ansible' / 'collections' / 'ansible_collections' / 'gpuops' / 'sglang'
    assert (collection / 'MANIFEST.json').is_file() and (collection / 'playbooks' / 'redeploy.yml').is_file()
