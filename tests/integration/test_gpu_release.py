"""gpu_release against real processes holding simulated device files, read by the nvidia-smi simulator."""
import os

import pytest

from helpers.ansible_run import run_task
from helpers.simulated import SimulatedGpuHost, is_running

KEYS = {'changed', 'killed', 'excluded', 'gpus_before', 'gpus', 'devices', 'compute_apps', 'elapsed', 'cmd'}


@pytest.fixture
def gpu_host(tmp_path):
    host = SimulatedGpuHost(tmp_path)
    yield host
    host.stop_all()


def release_args(host, **extra):
    args = {'devices': host.device_globs, 'nvidia_smi': host.nvidia_smi, 'term_timeout': 1, 'timeout': 10}
    args.update(extra)
    return args


def start_server_like_holders(host):
    return {
        'scheduler0': host.start('sglang::scheduler_TP0', hold=[(0, 20610)], open_=['nvidiactl', 'nvidia-uvm']),
        # ignores SIGTERM, like a wedged worker: needs SIGKILL
        'scheduler1': host.start('sglang::scheduler_TP1', hold=[(1, 20610)], on_term='ignore'),
        # holds only a caps file, which `fuser /dev/nvidia*` does not reach
        'caps_only': host.start('python3 cuda_probe.py', open_=['nvidia-caps/nvidia-cap1']),
        'daemon': host.start('nvidia-persistenced', open_=['nvidiactl']),
        'bystander': host.start('python3 /opt/jobs/unrelated_etl.py'),
    }


def test_check_mode_reports_holders_and_kills_nothing(tmp_path, gpu_host):
    procs = start_server_like_holders(gpu_host)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host), check=True)
    assert not result.failed, result['msg']
    assert result['changed'] is True and set(result) >= KEYS
    assert sorted(entry['pid'] for entry in result['killed']) == sorted(
        procs[name].inner_pid for name in ('scheduler0', 'scheduler1', 'caps_only'))
    assert all(is_running(proc) for proc in procs.values())
    assert result['gpus'] == result['gpus_before']
    assert [gpu['memory_used_mib'] for gpu in result['gpus_before']] == [20610, 20610]


def test_release_term_then_kill_spares_daemons_and_bystanders_and_is_idempotent(tmp_path, gpu_host):
    procs = start_server_like_holders(gpu_host)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host), name='release')
    assert not result.failed, result['msg']
    assert result['changed'] is True
    signals = dict((entry['pid'], entry['signal']) for entry in result['killed'])
    assert signals == {procs['scheduler0'].inner_pid: 'TERM', procs['scheduler1'].inner_pid: 'KILL',
                       procs['caps_only'].inner_pid: 'TERM'}
    for name in ('scheduler0', 'scheduler1', 'caps_only'):
        procs[name].wait(timeout=5)
    assert is_running(procs['daemon']) and is_running(procs['bystander'])
    assert [(entry['pid'], entry['reason']) for entry in result['excluded']] == [(procs['daemon'].inner_pid, 'exclude')]
    assert [gpu['memory_used_mib'] for gpu in result['gpus_before']] == [20610, 20610]
    assert [gpu['memory_used_mib'] for gpu in result['gpus']] == [0, 0]
    assert gpu_host.gpus() == [0, 0]
    assert 0 < result['elapsed'] < 10

    again = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host), name='again')
    assert not again.failed and again['changed'] is False and again['killed'] == []
    assert is_running(procs['daemon'])


def test_never_kills_its_own_ancestors(tmp_path, gpu_host):
    # pytest is an ancestor of the module process (pytest -> ansible-playbook -> worker -> module)
    with open(str(gpu_host.dev / 'nvidia0'), 'rb'):
        result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host))
    assert not result.failed
    assert result['killed'] == []
    assert {'pid': os.getpid(), 'reason': 'self/ancestor'}.items() <= result['excluded'][0].items()


def test_memory_that_never_drains_fails_with_a_table(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    gpu_host.set_leak(1, 512)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, timeout=0.5))
    assert result.failed and set(result) >= KEYS
    assert 'did not drain to <= 0 MiB within 0.5s on GPU(s) 1' in result['msg']
    assert '512/143771' in result['msg'] and 'driver-level leak' in result['msg']
    assert holder.wait(timeout=5) is not None
    assert result['gpus'][0]['memory_used_mib'] == 0


def test_threshold_allows_an_idle_reading_above_zero(tmp_path, gpu_host):
    gpu_host.set_leak(0, 4)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, max_used_mib=4, timeout=0.5))
    assert not result.failed and result['changed'] is False


def test_driver_failure_kills_nothing(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    gpu_host.break_driver()
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host))
    assert result.failed and "couldn't communicate with the NVIDIA driver" in result['msg']
    assert result['killed'] == [] and is_running(holder)
