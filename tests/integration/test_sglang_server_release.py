"""sglang_server's stop that releases the GPUs in the same run (its `release` option, issue 45): a tiny server run
detached, and real processes holding simulated device files, read by the nvidia-smi simulator."""
import subprocess
import sys

import pytest

from helpers.ansible_run import run_task
from helpers.simulated import SimulatedGpuHost, is_running
from helpers.tiny import alive

# gpu_release's result keys (tests/integration/test_gpu_release.py), which the stop's `release` carries.
RELEASE_KEYS = {'changed', 'killed', 'targets', 'excluded', 'gpus_before', 'gpus', 'devices', 'compute_apps', 'elapsed',
                'cmd', 'awaited', 'memory_reader', 'timeline'}


@pytest.fixture
def gpu_host(tmp_path):
    host = SimulatedGpuHost(tmp_path)
    yield host
    host.stop_all()


def release_option(host):
    return {'devices': host.device_globs, 'nvidia_smi': host.nvidia_smi, 'term_timeout': 3, 'memory_timeout': 10,
            'memory_reader': 'nvidia-smi'}


@pytest.mark.slow
def test_a_stop_with_release_awaits_the_server_ends_the_holders_and_proves_the_gpus_free(tmp_path, servers, gpu_host):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 20610)], open_=['nvidiactl'])
    bystander = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)
    try:
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                           server.args(state='stopped', wait=False, kill_patterns=['no-such-sglang-process'],
                                       release=release_option(gpu_host)), name='stop')
        assert not stopped.failed, stopped['msg']
        released = stopped['release']
        assert set(released) >= RELEASE_KEYS
        # The stop's own processes were awaited (not signalled again), the other holder ended, the memory proven free.
        assert stopped['stopping'] == [started['pid']] and not alive(started['pid'])
        assert released['awaited']['gone_at'] is not None
        assert [entry['pid'] for entry in released['killed']] == [holder.inner_pid]
        assert [gpu['memory_used_mib'] for gpu in released['gpus_before']] == [20610, 0]
        assert [gpu['memory_used_mib'] for gpu in released['gpus']] == [0, 0]
        holder.wait(timeout=5)
        assert bystander.poll() is None, 'a process holding no GPU was signalled'
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.slow
def test_a_stop_that_finds_strays_leaves_the_release_to_the_steps_after_it(tmp_path, servers, gpu_host):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 20610)])
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       server.args(state='stopped', wait=False, kill_patterns=['sglang::scheduler'],
                                   release=release_option(gpu_host)), name='stop')
    assert not stopped.failed, stopped['msg']
    # The container kill must end the stray first: nothing was released, and the holder still runs.
    assert holder.inner_pid in [entry['pid'] for entry in stopped['strays']]
    assert stopped['release'] is None
    assert is_running(holder) and gpu_host.gpus() == [20610, 0]
    assert stopped['stopping'] == [started['pid']]


@pytest.mark.slow
def test_a_bad_release_option_fails_before_anything_is_stopped(tmp_path, servers, gpu_host):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    for option, why in (({'max_used_mib': 'many'}, 'max_used_mib'), ({'exclude': ['(']}, "invalid exclude pattern '('"),
                        ({'term_timeout': -1}, 'term_timeout must not be negative'), ({'no_such': 1}, 'no_such')):
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                           server.args(state='stopped', release=dict(release_option(gpu_host), **option)), name='stop')
        assert stopped.failed and why in stopped['msg'] and 'nothing was stopped' in stopped['msg'], stopped['msg']
        assert stopped['release'] is None and alive(started['pid'])


@pytest.mark.slow
def test_a_restart_with_release_awaits_the_earlier_stop_ends_the_holders_then_starts(tmp_path, servers, gpu_host):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(1, 20610)], open_=['nvidiactl'])
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped', wait=False), name='stop')
    assert not stopped.failed and stopped['release'] is None and stopped['stopping'] == [started['pid']]
    restarted = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                         server.args(state='restarted', release=dict(release_option(gpu_host),
                                                                     await_exit=stopped['stopping'])), name='restart')
    assert not restarted.failed, restarted['msg']
    released = restarted['release']
    # The earlier stop's server awaited (gone before the release signalled anything), the holder ended, then the start.
    assert released['awaited']['gone_at'] is not None and released['awaited']['still_running'] == []
    assert [entry['pid'] for entry in released['killed']] == [holder.inner_pid]
    assert [gpu['memory_used_mib'] for gpu in released['gpus']] == [0, 0]
    assert restarted['healthy'] is True and restarted['started_at'] >= released['awaited']['gone_at']
    assert restarted['pid'] != started['pid'] and not alive(started['pid'])


@pytest.mark.slow
def test_a_restart_whose_release_fails_does_not_start_the_server(tmp_path, servers, gpu_host):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    gpu_host.set_leak(0, 4096)
    restarted = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                         server.args(state='restarted', release=dict(release_option(gpu_host), memory_timeout=0.5)),
                         name='restart')
    assert restarted.failed and 'were not released' in restarted['msg'] and 'not started' in restarted['msg']
    assert restarted['release']['gpus'][0]['memory_used_mib'] == 4096
    assert restarted['running'] is False and restarted['started_at'] is None and not alive(started['pid'])
