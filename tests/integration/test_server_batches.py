"""sglang_server_batches in a real run: a first play sorts the servers (run_once), the next plays take its batches
as their `serial`; each host records the batch it ran in, so the batches Ansible made are read back.

Six local hosts, listed out of rank order: two single-node servers and two groups of two nodes.
(The redeploy playbook's own three plays will take this place once they exist.)
"""
import json
import os
import subprocess
import sys

import pytest
import yaml

from helpers.ansible_run import ANSIBLE_ENV, REPO

INVENTORY = {'gpu': {'hosts': {
    'gpu1': {},
    'big1': {'sglang_server_group': 'big', 'sglang_node_rank': 1},
    'gpu2': {},
    'huge0': {'sglang_server_group': 'huge', 'sglang_node_rank': 0},
    'big0': {'sglang_server_group': 'big', 'sglang_node_rank': 0},
    'huge1': {'sglang_server_group': 'huge', 'sglang_node_rank': '1'},
}, 'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}

# What each host ran with: the play, and the batch it was in (ansible_play_batch).
RECORD = {'ansible.builtin.copy': {'dest': '{{ record_dir }}/{{ play_name }}-{{ inventory_hostname }}.json',
                                   'content': '{{ ansible_play_batch | to_json }}'},
          'name': 'Record the batch this host runs in', 'delegate_to': 'localhost'}
BATCHES = "hostvars[groups['gpu'][0]].sglang_batches"


def playbook():
    sort = {'name': 'Sort the servers', 'hosts': 'gpu', 'gather_facts': False, 'tasks': [
        {'name': 'Sort', 'run_once': True, 'ansible.builtin.set_fact': {'sglang_batches': (
            "{{ ansible_play_hosts_all | gpuops.sglang.sglang_server_batches(hostvars, redeploy_serial,"
            " redeploy_canary) }}")}},
        {'name': 'The single-node servers', 'ansible.builtin.add_host': {'name': '{{ item }}', 'groups': 'single'},
         'loop': '{{ sglang_batches.single_hosts }}', 'run_once': True},
        {'name': 'The groups, each one whole in rank order', 'run_once': True,
         'ansible.builtin.add_host': {'name': '{{ item }}', 'groups': 'grouped'},
         'loop': '{{ sglang_batches.group_hosts }}'},
    ]}

    def play(name, hosts, serial):
        return {'name': name, 'hosts': hosts, 'gather_facts': False, 'serial': '{{ %s.%s }}' % (BATCHES, serial),
                'vars': {'play_name': name}, 'tasks': [RECORD]}
    return [sort, play('single', 'single', 'single_serial'), play('grouped', 'grouped', 'group_serial')]


def batches_of(record_dir, play):
    """The batches Ansible ran the play in, in order of their first host."""
    seen = []
    for name in sorted(os.listdir(record_dir)):
        if name.startswith(play + '-'):
            with open(os.path.join(record_dir, name)) as handle:
                batch = json.load(handle)
            if batch not in seen:
                seen.append(batch)
    return sorted(seen, key=lambda batch: [ORDER.index(host) for host in batch])


ORDER = ['gpu1', 'gpu2', 'big0', 'big1', 'huge0', 'huge1']


def run(tmp_path, serial, canary):
    (tmp_path / 'inventory.yml').write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / 'sort.yml').write_text(yaml.safe_dump(playbook(), sort_keys=False))
    records = tmp_path / 'records'
    records.mkdir()
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(tmp_path / 'inventory.yml'),
         str(tmp_path / 'sort.yml'), '-e', json.dumps({'redeploy_serial': serial, 'redeploy_canary': canary,
                                                      'record_dir': str(records)})],
        env=dict(os.environ, **ANSIBLE_ENV), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return batches_of(str(records), 'single'), batches_of(str(records), 'grouped')


@pytest.mark.parametrize('serial, canary, single, grouped', [
    ('100%', 0, [['gpu1', 'gpu2']], [['big0', 'big1', 'huge0', 'huge1']]),
    (1, 0, [['gpu1'], ['gpu2']], [['big0', 'big1'], ['huge0', 'huge1']]),
    ('50%', 1, [['gpu1'], ['gpu2']], [['big0', 'big1'], ['huge0', 'huge1']]),
    (['100%'], 3, [['gpu1', 'gpu2']], [['big0', 'big1'], ['huge0', 'huge1']]),
], ids=['all-at-once', 'one-server-a-batch', 'half-after-a-canary', 'canary-reaching-into-the-groups'])
def test_batches_count_servers_and_a_group_runs_whole(tmp_path, serial, canary, single, grouped):
    assert run(tmp_path, serial, canary) == (single, grouped)
