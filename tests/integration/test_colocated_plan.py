"""Servers sharing a machine, through Ansible (issue 44): the role's plan finds its neighbours in the inventory,
whether or not they are in the play, and refuses before anything stops, naming both; a server that owns some GPUs
has them read on its machine by the plan (sglang_server_info's machine read). The rules themselves are unit-tested
in tests/unit/plugins/plugin_utils/test_colocated.py."""
import json
import os

import pytest

from helpers.ansible_run import TARGET_PYTHON, run_playbook, run_task

GPU0, GPU1 = 'GPU-0a0a0a0a-0000-0000-0000-000000000000', 'GPU-1b1b1b1b-1111-1111-1111-111111111111'
PREFIX = "nothing was stopped: Plan this host's run (the rollout gate, the variable rules, the server's flags and files): "


def fake_nvidia_smi(folder):
    """An nvidia-smi that knows two GPUs and answers --query-gpu as the real one does."""
    path = folder / 'nvidia-smi'
    path.write_text('#!/bin/sh\nprintf "0, %s, 0, 81559\\n1, %s, 0, 81559\\n"\n' % (GPU0, GPU1))
    path.chmod(0o755)
    return str(path)


def server_vars(tmp_path, name, **changes):
    folder = tmp_path / name
    values = {'ansible_connection': 'local', 'ansible_python_interpreter': TARGET_PYTHON, 'ansible_host': '127.0.0.1',
              'sglang_model_path': '/models/m', 'sglang_draft_model_path': '/models/d',
              'sglang_dynamic_spec_enabled': False, 'sglang_report_dir': str(tmp_path / 'reports'),
              'sglang_config_dir': str(folder / 'etc'), 'sglang_run_dir': str(folder / 'run'),
              'sglang_log_file': str(folder / 'log' / 'server.log'), 'sglang_guard_dir': str(tmp_path / 'guard'),
              'sglang_service_name': 'sglang-' + name, 'sglang_python': '/nonexistent/python'}
    values.update(changes)
    return values


def inventory(tmp_path, hosts):
    path = tmp_path / 'hosts.json'
    path.write_text(json.dumps({'gpu': {'hosts': hosts}}))
    return str(path)


def report(tmp_path, host):
    return json.loads((tmp_path / 'reports' / ('%s.json' % host)).read_text())


@pytest.mark.slow
def test_a_neighbour_outside_the_play_on_the_same_port_is_refused_naming_both(tmp_path):
    hosts = {'gpu1': server_vars(tmp_path, 'gpu1', sglang_gpus=[]),
             'gpu1b': server_vars(tmp_path, 'gpu1b', sglang_gpus=[])}
    # gpu1b is not in the run: the plan reads its variables through hostvars (its port the role's default too).
    run = run_playbook(tmp_path, 'playbooks/redeploy.yml', inventory(tmp_path, hosts), limit='gpu1')
    assert run.rc != 0
    reason = report(tmp_path, 'gpu1')['reason']
    assert reason.startswith(PREFIX + 'gpu1 and gpu1b run on one machine (ansible_host 127.0.0.1) and share the port'
                             ' 30000; give each server its own')
    assert 'gpu1 and gpu1b share GPUs (one machine): gpu1 owns every GPU (sglang_gpus empty)' in reason
    assert not (tmp_path / 'gpu1' / 'etc').exists()


@pytest.mark.slow
def test_a_gpu_the_machine_lacks_is_refused_by_the_plans_read_of_the_machine(tmp_path, monkeypatch):
    # The local connection's modules find nvidia-smi on ansible-playbook's PATH.
    monkeypatch.setenv('PATH', '%s%s%s' % (os.path.dirname(fake_nvidia_smi(tmp_path)), os.pathsep, os.environ['PATH']))
    hosts = {'gpu1': server_vars(tmp_path, 'gpu1', sglang_gpus=[GPU0]),
             'gpu1b': server_vars(tmp_path, 'gpu1b', sglang_port=30001, sglang_gpus=[2])}
    # One at a time: a failed canary would leave the other out of the run.
    for host in hosts:
        assert run_playbook(tmp_path, 'playbooks/redeploy.yml', inventory(tmp_path, hosts), name=host, limit=host).rc != 0
    assert report(tmp_path, 'gpu1b')['reason'] == PREFIX + (
        'sglang_gpus of gpu1b names 2, which its machine does not have (it has: 0 %s, 1 %s). Name GPUs as nvidia-smi'
        ' numbers them there, or by UUID.' % (GPU0, GPU1))
    # gpu1's own GPU is there: the plan let it through to the state read (its interpreter is missing).
    assert report(tmp_path, 'gpu1')['reason'] == (
        'nothing was stopped: Decide whether the server must be redeployed: sglang_python /nonexistent/python does not'
        ' exist on gpu1; point it at the interpreter whose site-packages holds sglang.')


def test_the_machine_read_resolves_the_gpus_and_each_servers_sglang_folder(tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.sglang_server_info', {
        'machine_only': True, 'launch_file': str(tmp_path / 'launch.json'), 'pidfile': str(tmp_path / 'pid'),
        'url': '', 'python': '/nonexistent/python', 'gpus': ['1'], 'nvidia_smi': fake_nvidia_smi(tmp_path),
        'neighbours': [{'name': 'gpu1b', 'python': '', 'gpus': [GPU0]}]})
    assert not result.failed, result
    machine = result['machine']
    assert machine['gpus'] == [{'index': 0, 'uuid': GPU0}, {'index': 1, 'uuid': GPU1}]
    assert machine['gpus_error'] is None
    with open('/etc/machine-id') as handle:
        assert machine['machine_id'] == handle.read().strip()
    assert machine['site_packages'] is None
    assert machine['site_packages_of'] == [{'name': 'gpu1b', 'site_packages': None}]
    # Nothing of the server was read.
    assert result['running'] is False and result['configs_changed'] == []
