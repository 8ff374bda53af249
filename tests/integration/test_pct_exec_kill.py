"""pct_exec_kill through the pct simulator into a real PID namespace."""
import pytest

from helpers.ansible_run import run_task
from helpers.simulated import SimulatedContainer, SimulatedGpuHost, is_running

KEYS = {'changed', 'killed', 'remaining', 'cmd', 'vmid'}
LAUNCHER = 'python3 -m sglang.launch_server --model-path /models/m --speculative-algorithm EAGLE3 --port 30000'


@pytest.fixture
def lab(tmp_path):
    host = SimulatedGpuHost(tmp_path, gpus=1)
    container = SimulatedContainer(tmp_path)
    yield host, container
    host.stop_all()
    container.destroy()


def start_in_container(lab):
    host, container = lab
    return {
        'launcher': host.start(LAUNCHER, on_term='drain=0.3', prefix=container.nsenter),
        'scheduler': host.start('sglang::scheduler_TP0', on_term='ignore', prefix=container.nsenter),
        'detokenizer': host.start('sglang::detokenizer', prefix=container.nsenter),
        'unrelated': host.start('python3 /opt/jobs/nightly_eval.py', prefix=container.nsenter),
        # same title, but on the node itself, outside the container: must survive
        'outside': host.start('sglang::scheduler_TP0'),
    }


def test_check_mode_lists_only_container_sglang_processes(tmp_path, lab):
    procs = start_in_container(lab)
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': lab[1].pct}, check=True)
    assert not result.failed, result['msg']
    assert set(result) >= KEYS and result['changed'] is True
    assert sorted(entry['pid'] for entry in result['killed']) == sorted(
        procs[name].inner_pid for name in ('launcher', 'scheduler', 'detokenizer'))
    assert all(is_running(proc) for proc in procs.values())


def test_kill_escalates_inside_the_namespace_and_is_idempotent(tmp_path, lab):
    procs = start_in_container(lab)
    args = {'vmid': 101, 'pct': lab[1].pct, 'term_timeout': 1}
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', args, name='kill')
    assert not result.failed, result['msg']
    signals = dict((entry['pid'], entry['signal']) for entry in result['killed'])
    assert signals == {procs['launcher'].inner_pid: 'TERM', procs['scheduler'].inner_pid: 'KILL',
                       procs['detokenizer'].inner_pid: 'TERM'}
    assert result['remaining'] == []
    for name in ('launcher', 'scheduler', 'detokenizer'):
        procs[name].wait(timeout=5)
    assert is_running(procs['unrelated']) and is_running(procs['outside'])
    assert all(cmd[:4] == [lab[1].pct, 'exec', '101', '--'] for cmd in result['cmd'][1:])

    again = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', args, name='again')
    assert not again.failed and again['changed'] is False and again['killed'] == []


def test_stopped_container_fails_and_kills_nothing(tmp_path, lab):
    procs = start_in_container(lab)
    lab[1].stop()
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': lab[1].pct})
    assert result.failed and 'container 101 is stopped' in result['msg'] and set(result) >= KEYS
    assert all(is_running(proc) for proc in procs.values())


def test_unknown_container_fails_with_pct_message(tmp_path, lab):
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 999, 'pct': lab[1].pct})
    assert result.failed and "999.conf' does not exist" in result['msg']


def test_missing_pct_binary(tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101})
    assert result.failed and 'pct was not found on PATH' in result['msg']
