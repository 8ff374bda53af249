"""playbooks/redeploy.yml's batches in a real run: its first play sorts the servers (sglang_server_batches), the
single-node play and the group play take their `serial` from it. Six local hosts, listed out of rank order: two
single-node servers and two groups of two nodes, every one left alone (sglang_redeploy_skip), so the role runs
its plan and its report only; the batches Ansible made are read back from the run's events (each batch starts the
plan task anew)."""
import os
import sys

import pytest
import yaml

from helpers.ansible_run import run_playbook

INVENTORY = {'all': {'children': {'gpu': {'hosts': {
    'gpu1': {},
    'big1': {'sglang_server_group': 'big', 'sglang_node_rank': 1},
    'gpu2': {},
    'huge0': {'sglang_server_group': 'huge', 'sglang_node_rank': 0},
    'big0': {'sglang_server_group': 'big', 'sglang_node_rank': 0},
    'huge1': {'sglang_server_group': 'huge', 'sglang_node_rank': '1'},
}, 'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
            'sglang_model_path': '/models/m', 'sglang_tp_size': 2, 'sglang_redeploy_skip': True}}}}}
PLAN_TASK = "Plan this host's run (the rollout gate, the variable rules, the server's flags and files)"


def batches(run):
    """{play name: [each batch's hosts, in order]}: Ansible starts the play anew for each batch of `serial`."""
    found, current = {}, None
    for event in run.events:
        data = event.get('event_data') or {}
        if event.get('event') == 'playbook_on_play_start':
            current = []
            found.setdefault(data.get('play'), []).append(current)
        if event.get('event') in ('runner_on_ok', 'runner_on_failed') and data.get('task', '').endswith(PLAN_TASK):
            current.append(data['host'])
    return dict((play, [sorted(batch, key=ORDER.index) for batch in runs if batch]) for play, runs in found.items())


ORDER = ['gpu1', 'gpu2', 'big0', 'big1', 'huge0', 'huge1']


def run(tmp_path, serial, canary):
    done = played(tmp_path, {'redeploy_serial': serial, 'redeploy_canary': canary})
    return plays(done), printed_batches(done)


def played(tmp_path, rolling, cmdline=None):
    inventory = tmp_path / 'inventory.yml'
    inventory.write_text(yaml.safe_dump(INVENTORY))
    done = run_playbook(tmp_path, 'playbooks/redeploy.yml', str(inventory), rolling, cmdline=cmdline)
    assert done.rc == 0, done.stdout[-3000:]
    return done


def plays(done):
    found = batches(done)
    return (found.get('Redeploy the patched SGLang server (single-node servers)'),
            found.get('Redeploy the patched SGLang server (servers spanning several hosts, one group at a time per'
                      ' batch slot)'))


@pytest.mark.slow
@pytest.mark.parametrize('serial, canary, single, grouped, canary_batches', [
    # One group per batch whatever serial says; serial and the canary shape the single-node servers' batches.
    ('100%', 0, [['gpu1', 'gpu2']], [['big0', 'big1'], ['huge0', 'huge1']], 0),
    (1, 0, [['gpu1'], ['gpu2']], [['big0', 'big1'], ['huge0', 'huge1']], 0),
    ('50%', 1, [['gpu1'], ['gpu2']], [['big0', 'big1'], ['huge0', 'huge1']], 1),
    # Three servers of canary: both single-node servers and the first group.
    (['100%'], 3, [['gpu1', 'gpu2']], [['big0', 'big1'], ['huge0', 'huge1']], 2),
], ids=['all-at-once', 'one-server-a-batch', 'half-after-a-canary', 'canary-reaching-into-the-groups'])
def test_batches_count_servers_and_a_group_runs_whole(tmp_path, serial, canary, single, grouped, canary_batches):
    # The printed plan names the batches Ansible then made, the canary's first.
    assert run(tmp_path, serial, canary) == ((single, grouped), [
        'batch %d%s: %s' % (number, ' (canary)' if number <= canary_batches else '', ', '.join(hosts))
        for number, hosts in enumerate(single + grouped, 1)])


@pytest.mark.slow
@pytest.mark.parametrize('cmdline', [None, '--check'], ids=['real', 'check'])
def test_without_a_rolling_policy_a_canary_goes_first_and_the_plan_says_it_is_the_default(tmp_path, cmdline):
    done = played(tmp_path, {}, cmdline)
    # Four servers (two single, two groups): the canary gpu1 alone, then 25% (one server) at a time.
    assert plays(done) == ([['gpu1'], ['gpu2']], [['big0', 'big1'], ['huge0', 'huge1']])
    assert printed_batches(done) == ['batch 1 (canary): gpu1', 'batch 2: gpu2', 'batch 3: big0, big1',
                                     'batch 4: huge0, huge1']
    assert ('rolling policy default (no redeploy_serial, redeploy_canary, redeploy_max_unavailable or'
            ' redeploy_max_fail_percentage set; the whole fleet at once: -e redeploy_serial=100% -e redeploy_canary=0):'
            ' canary 1 server(s), then batches of 25% server(s), at most 1 of 4 server(s) unavailable, the first'
            ' failure stops the rollout') in ' '.join(printed_plan(done).split())


def printed_plan(done):
    for event in done.events:
        data = event.get('event_data') or {}
        if event.get('event') == 'runner_on_ok' and data.get('task', '').startswith("Print the rollout's plan"):
            return '\n'.join(data['res']['msg'])
    raise AssertionError('no printed plan in the run')


def printed_batches(done):
    return [line for line in printed_plan(done).split('\n') if line.startswith('batch ')]
