"""sglang_server's stop that releases the GPUs in the same run (its `release` option, issue 45): a tiny server run
detached, and real processes holding simulated device files, read by the nvidia-smi simulator.

And the role's start, which releases in its own run, cut off from its controller mid-run, as when ansible-playbook
is SIGKILLed while the old server drains: the module runs as Ansible runs it on a host, a process whose stdout is
the pipe it reports through, and the test closes the reading end while the release awaits the stopping server (a
process of the test's, let go once the pipe is closed). The module must start nothing and renew nothing after that."""
import json
import os
import subprocess
import sys

import pytest

from helpers.ansible_run import REPO, run_task
from helpers.module_runner import processes_naming
from helpers.simulated import SimulatedGpuHost, is_running, wait_for
from helpers.tiny import TinyServer, alive

# The module as AnsiballZ runs it on a host: its main() in a process whose stdin carries the arguments.
MODULE = 'from ansible_collections.gpuops.sglang.plugins.modules.sglang_server import main; main()'

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


@pytest.fixture
def draining():
    """A process standing for the old server while it drains: the release awaits it until the test lets it go."""
    process = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def start_module(args, tmp_path):
    """The module in a process of its own, its arguments on stdin as Ansible hands them, its stdout a pipe."""
    environment = dict(os.environ, PYTHONPATH=os.path.join(REPO, '.cache', 'collections'))
    with open(str(tmp_path / 'module.stderr'), 'ab') as stderr:
        process = subprocess.Popen([sys.executable, '-c', MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=stderr, env=environment, cwd=str(tmp_path))
    process.stdin.write(json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode('utf-8'))
    process.stdin.close()
    return process


def run_module(args, tmp_path):
    """The module run to its end with its controller there: its result."""
    process = start_module(args, tmp_path)
    out = process.stdout.read()
    process.stdout.close()
    process.wait(timeout=60)
    return json.loads(out.decode('utf-8').strip().splitlines()[-1])


@pytest.fixture
def server(tmp_path):
    """A tiny server run detached, started by the module (no ansible-playbook: seconds less each way)."""
    made = TinyServer(tmp_path, 'a')
    yield made
    run_module(made.args(state='stopped'), tmp_path)


def restart_args(server, gpu_host, draining, **extra):
    release = dict(release_option(gpu_host), term_timeout=120, await_exit=[draining.pid])
    return server.args(state='restarted', release=release, **extra)


def cut_off(module, draining):
    """The controller goes (the pipe's only reader closed), then the old server exits; the module ends on its own."""
    module.stdout.close()
    draining.terminate()
    draining.wait(timeout=10)
    wait_for(lambda: module.poll() is not None, 60, 'the module ending once its controller is gone')


def serving(server):
    return processes_naming('--port %d' % server.port)


@pytest.mark.slow
def test_a_restart_cut_off_from_its_controller_while_it_awaits_the_old_server_starts_nothing(
        tmp_path, server, gpu_host, draining):
    started = run_module(server.args(state='started'), tmp_path)
    assert not started.get('failed') and started['healthy'], started
    module = start_module(restart_args(server, gpu_host, draining), tmp_path)
    # The restart stopped the server and now awaits the draining one: nothing else can happen until it exits.
    wait_for(lambda: not alive(started['pid']), 30, 'the restart stopping the server')
    assert module.poll() is None
    cut_off(module, draining)
    # The release ran to its end (it only awaits, ends and proves); the start did not follow it.
    assert module.returncode != 0
    assert serving(server) == [], 'a server was started for a controller that was gone'
    assert not os.path.exists(server.args()['pidfile']) or not alive(int(open(server.args()['pidfile']).read()))


@pytest.mark.slow
def test_a_restart_cut_off_from_its_controller_renews_the_guard_no_more(tmp_path, server, gpu_host, draining):
    started = run_module(server.args(state='started'), tmp_path)
    assert not started.get('failed') and started['healthy'], started
    guard = tmp_path / 'guard'
    guard.mkdir()
    (guard / 'state.json').write_text(json.dumps({'run_id': 'run-1', 'armed_at': 1.0, 'deadline': 9e10, 'idle': 90}))
    lease = guard / 'lease.json'
    module = start_module(restart_args(server, gpu_host, draining, guard={'folder': str(guard), 'run_id': 'run-1'}),
                          tmp_path)

    def renewed_by():
        return json.loads(lease.read_text())['by'] if lease.exists() else None
    # The release's renewal, held while it awaits the draining server (no renewal until it exits).
    wait_for(lambda: renewed_by() == 'sglang_server restarted (gpu release)', 30, 'the release renewing the guard')
    held = lease.read_text()
    cut_off(module, draining)
    # Not the release's last renewal, not the start's: the lease is as it was when the controller went, so the
    # guard's idle bound counts from there.
    assert module.returncode != 0
    assert lease.read_text() == held
    assert serving(server) == []
