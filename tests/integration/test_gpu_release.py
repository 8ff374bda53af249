"""gpu_release against real processes holding simulated device files, read by the nvidia-smi simulator."""
import os
import pwd
import signal

import pytest

from helpers import faults
from helpers.ansible_run import run_task
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import read_proc_record
from helpers.simulated import SimulatedGpuHost, gate_opened_by_first_call, is_running, wait_for

KEYS = {'changed', 'killed', 'targets', 'excluded', 'gpus_before', 'gpus', 'devices', 'compute_apps', 'elapsed', 'cmd',
        'awaited'}


@pytest.fixture
def gpu_host(tmp_path, request):
    host = SimulatedGpuHost(tmp_path, **getattr(request, 'param', {}))
    yield host
    host.stop_all()


def release_args(host, **extra):
    args = {'devices': host.device_globs, 'nvidia_smi': host.nvidia_smi, 'term_timeout': 3, 'memory_timeout': 10}
    args.update(extra)
    return args


def start_server_like_holders(host):
    return {
        'scheduler0': host.start('sglang::scheduler_TP0', hold=[(0, 20610)], open_=['nvidiactl', 'nvidia-uvm']),
        # ignores SIGTERM, like a wedged worker: needs SIGKILL
        'scheduler1': host.start('sglang::scheduler_TP1', hold=[(1, 20610)], on_term='ignore'),
        # holds only a caps file, which `fuser /dev/nvidia*` does not reach
        'caps_only': host.start('python3 cuda_probe.py', open_=['nvidia-caps/nvidia-cap1']),
        # the real daemon: its own program, run by root (these tests run as root)
        'daemon': host.start(program=host.program('nvidia-persistenced'), open_=['nvidiactl']),
        'bystander': host.start('python3 /opt/jobs/unrelated_etl.py'),
    }


@pytest.mark.slow
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
    # The dry run's list: each holder's user (its effective uid's account) and the GPUs (device minors) it holds.
    user = pwd.getpwuid(os.geteuid()).pw_name
    listed = dict((entry['pid'], entry) for entry in result['targets'])
    for name, title, gpus in (('scheduler0', 'sglang::scheduler_TP0', [0]), ('scheduler1', 'sglang::scheduler_TP1', [1]),
                              ('caps_only', 'python3 cuda_probe.py', [])):
        entry = listed.pop(procs[name].inner_pid)
        assert (entry['user'], entry['gpus']) == (user, gpus) and entry['cmdline'].startswith(title)
    assert listed == {}


@pytest.mark.slow
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
    assert [(entry['pid'], entry['why']) for entry in result['excluded']] == [(procs['daemon'].inner_pid, 'exclude')]
    assert [gpu['memory_used_mib'] for gpu in result['gpus_before']] == [20610, 20610]
    assert [gpu['memory_used_mib'] for gpu in result['gpus']] == [0, 0]
    assert gpu_host.gpus() == [0, 0]
    assert 0 < result['elapsed'] < 10

    again = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host), name='again')
    assert not again.failed and again['changed'] is False and again['killed'] == []
    assert is_running(procs['daemon'])


@pytest.mark.slow
def test_await_exit_lets_a_draining_server_exit_by_itself_and_kills_what_outstays_term_timeout(tmp_path, gpu_host):
    # An earlier step sent SIGTERM and did not wait (sglang_server wait=false). The draining holder must not
    # be signalled again: its drain lasts until 0.5 s after the module's first nvidia-smi call (gpus_before,
    # just before the wait), so the module finds it still draining. One that ignores SIGTERM gets SIGKILL
    # once term_timeout passed, and no second SIGTERM.
    gate = str(tmp_path / 'drain-gate')
    open(gate, 'w').close()
    draining = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 20610)], on_term='gate=' + gate)
    wedged = gpu_host.start('sglang::scheduler_TP1', hold=[(1, 20610)], on_term='ignore')
    for proc in (draining, wedged):
        os.kill(proc.pid, signal.SIGTERM)
    nvidia_smi = gate_opened_by_first_call(tmp_path, gpu_host.nvidia_smi, gate)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(
        gpu_host, term_timeout=2, nvidia_smi=nvidia_smi, await_exit=[wedged.inner_pid, draining.inner_pid]),
        name='release')
    assert not result.failed, result['msg']
    assert result['awaited']['pids'] == sorted([draining.inner_pid, wedged.inner_pid])
    assert result['awaited']['still_running'] == [wedged.inner_pid] and result['awaited']['waited_s'] >= 2.0
    assert result['awaited']['gone_at'] is not None
    assert [(entry['pid'], entry['signal']) for entry in result['killed']] == [(wedged.inner_pid, 'KILL')]
    assert draining.wait(timeout=5) == 0  # it finished its drain: exit status 0, no signal from the module
    assert wedged.wait(timeout=5) == -signal.SIGKILL
    assert [gpu['memory_used_mib'] for gpu in result['gpus_before']] == [20610, 20610]
    assert gpu_host.gpus() == [0, 0]


def test_await_exit_is_not_waited_on_in_check_mode(tmp_path, gpu_host):
    wedged = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 20610)], on_term='ignore')
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                      release_args(gpu_host, term_timeout=30, await_exit=[wedged.inner_pid]), check=True)
    assert not result.failed and result['awaited']['pids'] == [] and result['awaited']['waited_s'] == 0.0
    assert is_running(wedged)


def test_never_kills_its_own_ancestors(tmp_path, gpu_host):
    # pytest is an ancestor of the module process (pytest -> module, as ansible-playbook -> worker -> module is)
    with open(str(gpu_host.dev / 'nvidia0'), 'rb'):
        result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host))
    assert not result.failed
    assert result['killed'] == []
    assert {'pid': os.getpid(), 'why': 'self/ancestor'}.items() <= result['excluded'][0].items()


# The driver frees a dead holder's memory at once here: the module reads the GPUs only after the holder is
# gone, so GPU 0 reads 0 MiB on the first read however slow the machine is, and only GPU 1's leak is left.
@pytest.mark.slow
@pytest.mark.parametrize('gpu_host', [{'release_delay': 0}], indirect=True)
def test_memory_that_never_drains_fails_with_a_table(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    gpu_host.set_leak(1, 512)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, memory_timeout=0.5))
    assert result.failed and set(result) >= KEYS
    assert 'did not drain to <= 0 MiB on GPU(s) 1 within 0.5s' in result['msg']
    assert '512/143771' in result['msg'] and 'driver-level problem' in result['msg']
    assert holder.wait(timeout=5) is not None
    assert result['gpus'][0]['memory_used_mib'] == 0


def test_threshold_allows_an_idle_reading_above_zero(tmp_path, gpu_host):
    gpu_host.set_leak(0, 4)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, max_used_mib=4, memory_timeout=0.5))
    assert not result.failed and result['changed'] is False


def test_driver_failure_kills_nothing(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    gpu_host.break_driver()
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host))
    assert result.failed and "couldn't communicate with the NVIDIA driver" in result['msg']
    assert result['killed'] == [] and is_running(holder)



@pytest.mark.slow
def test_a_glob_reaching_non_nvidia_files_is_refused_and_nothing_is_signalled(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    for check in (True, False):
        result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, devices=['/dev/*']),
                          check=check, name='check' if check else 'real')
        assert result.failed and set(result) >= KEYS
        assert '/dev/null (its name does not start with "nvidia")' in result['msg']
        assert 'nothing was signalled' in result['msg'] and result['killed'] == []
    assert is_running(holder)


def test_a_glob_matching_nothing_fails_instead_of_releasing_nothing(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    typo = [str(gpu_host.dev / 'nvidai[0-9]*')]
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, devices=typo))
    assert result.failed and 'match no file' in result['msg'] and typo[0] in result['msg']
    assert is_running(holder)


@pytest.mark.slow
def test_exclude_adds_to_the_builtin_daemons_and_builtin_exclude_replaces_them(tmp_path, gpu_host):
    daemon = gpu_host.start(program=gpu_host.program('nvidia-persistenced'), open_=['nvidiactl'])
    exporter = gpu_host.start(program=gpu_host.program('my-gpu-exporter'), open_=['nvidiactl'])
    worker = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    added = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                     release_args(gpu_host, exclude=['^my-gpu-exporter$']), name='added')
    assert not added.failed, added['msg']
    assert [entry['pid'] for entry in added['killed']] == [worker.inner_pid]
    assert sorted(entry['pid'] for entry in added['excluded']) == sorted([daemon.inner_pid, exporter.inner_pid])
    assert is_running(daemon) and is_running(exporter)

    replaced = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                        release_args(gpu_host, builtin_exclude=['^my-gpu-exporter$']), name='replaced')
    assert not replaced.failed, replaced['msg']
    assert [entry['pid'] for entry in replaced['killed']] == [daemon.inner_pid]
    daemon.wait(timeout=10)
    assert is_running(exporter)


def test_a_process_named_like_a_daemon_is_released_not_excluded(tmp_path, gpu_host):
    # Any user can name a process nvidia-persistenced: a symlink of that name gives it the command name
    # (comm "nvidia-persiste") and argv[0], the title (setproctitle, `exec -a`) the whole command line.
    # It holds GPU memory like any worker and must be ended, or the release's proof fails.
    linked = gpu_host.start(program=gpu_host.program('nvidia-persistenced', copy=False), hold=[(0, 20610)])
    titled = gpu_host.start('nvidia-persistenced', hold=[(1, 20610)], open_=['nvidiactl'])
    with open('/proc/%d/comm' % linked.inner_pid) as comm:
        assert comm.read().strip() == 'nvidia-persiste'
    daemon = gpu_host.start(program=gpu_host.program('nv-hostengine'), open_=['nvidiactl'])
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host), name='release')
    assert not result.failed, result['msg']
    assert sorted(entry['pid'] for entry in result['killed']) == sorted([linked.inner_pid, titled.inner_pid])
    linked.wait(timeout=5)
    titled.wait(timeout=5)
    assert [(entry['pid'], entry['executable'], entry['why']) for entry in result['excluded']] == [
        (daemon.inner_pid, str(gpu_host.root / 'programs' / 'nv-hostengine'), 'exclude')]
    assert is_running(daemon)
    assert gpu_host.gpus() == [0, 0]


@pytest.mark.slow
def test_hung_nvidia_smi_is_killed_at_command_timeout_and_nothing_is_signalled(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    pid_file = tmp_path / 'hung.pid'
    hung = faults.hanging_command(tmp_path / 'nvidia-smi-hung', pid_file)
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                      release_args(gpu_host, nvidia_smi=hung, command_timeout=1))
    assert result.failed and set(result) >= KEYS
    assert '`%s --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits` timed out after 1s' \
        % hung in result['msg']
    assert 'nothing was signalled' in result['msg'] and is_running(holder)
    # the hung command itself was killed, not left behind
    assert not os.path.exists('/proc/%s' % pid_file.read_text().strip())


@pytest.mark.slow
def test_an_unreadable_gpu_before_the_release_is_reported_not_fatal(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    smi = faults.nvidia_smi_with_sick_gpu(tmp_path / 'nvidia-smi-na-once', gpu_host.nvidia_smi,
                                          '1, GPU-sim-0001, [N/A], [N/A]', times=1, counter=tmp_path / 'count')
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, nvidia_smi=smi))
    assert not result.failed, result['msg']
    assert result['gpus_before'][1]['error'] == \
        "nvidia-smi reported memory.used '[N/A]' and memory.total '[N/A]' instead of a MiB number"
    assert any('GPU 1 could not be read' in warning for warning in result.get('warnings', []))
    assert [gpu['memory_used_mib'] for gpu in result['gpus']] == [0, 0]
    holder.wait(timeout=10)


@pytest.mark.slow
def test_the_final_proof_must_read_every_gpu(tmp_path, gpu_host):
    holder = gpu_host.start('sglang::scheduler_TP0', hold=[(0, 1000)])
    smi = faults.nvidia_smi_with_sick_gpu(tmp_path / 'nvidia-smi-unknown', gpu_host.nvidia_smi,
                                          'Unable to determine the device handle for GPU 0000:C1:00.0: Unknown Error')
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', release_args(gpu_host, nvidia_smi=smi, memory_timeout=0.5))
    assert result.failed and 'could not be read on GPU(s) ?' in result['msg']
    assert 'unreadable: unparsable nvidia-smi line: Unable to determine the device handle' in result['msg']
    assert 'already signalled: pid %d (SIGTERM)' % holder.inner_pid in result['msg']
    holder.wait(timeout=10)


# gpus: a server that shares its machine releases its own GPUs alone (issue 44). GPU 0's device file is /dev/nvidia1
# and GPU 1's /dev/nvidia0 here, as the driver's information files say: a module taking the minor for the index
# would end the neighbour and spare the leak.
SWAPPED_MINORS = [1, 0]


def scoped_args(host, driver_info, **extra):
    return release_args(host, gpus=[0], driver_info=driver_info, **extra)


@pytest.mark.slow
def test_gpus_ends_the_holders_of_its_gpus_and_spares_every_other_holder(tmp_path, gpu_host):
    driver_info = gpu_host.write_driver_information(SWAPPED_MINORS)
    leak = gpu_host.start('python3 leaked_cuda_holder.py', hold=[(0, 20610)], open_=['nvidiactl', 'nvidia-uvm'])
    neighbour = gpu_host.start('sglang::scheduler_TP0', hold=[(1, 20610)], open_=['nvidiactl', 'nvidia-uvm'])
    monitor = gpu_host.start('python3 gpu_monitor.py', open_=['nvidiactl'])
    checked = run_task(tmp_path, 'gpuops.sglang.gpu_release', scoped_args(gpu_host, driver_info), check=True,
                       name='check')
    assert not checked.failed, checked['msg']
    assert [entry['pid'] for entry in checked['killed']] == [leak.inner_pid]
    assert all(is_running(proc) for proc in (leak, neighbour, monitor))

    result = run_task(tmp_path, 'gpuops.sglang.gpu_release', scoped_args(gpu_host, driver_info), name='release')
    assert not result.failed, result['msg']
    assert [(gpu['index'], gpu['minor']) for gpu in result['scope']] == [(0, 1)]
    assert [(entry['pid'], entry['signal']) for entry in result['killed']] == [(leak.inner_pid, 'TERM')]
    leak.wait(timeout=5)
    assert is_running(neighbour) and is_running(monitor)
    spared = {entry['pid']: (entry['why'], entry['gpus']) for entry in result['spared']}
    assert spared == {neighbour.inner_pid: ('other GPUs', [0]), monitor.inner_pid: ('shared devices only', [])}
    # The proof covers GPU 0 alone: GPU 1 keeps its 20 GiB, and the release holds.
    assert [gpu['memory_used_mib'] for gpu in result['gpus']] == [0, 20610]
    assert gpu_host.gpus() == [0, 20610]
    assert any(entry['event'] == 'compute apps' and entry['detail'] == 'none' for entry in result['timeline'])


@pytest.mark.slow
def test_a_holder_of_only_the_shared_files_is_ended_when_it_is_the_stopping_servers(tmp_path, gpu_host):
    driver_info = gpu_host.write_driver_information()
    # The server: a shell (awaited, never exiting by itself) whose child holds nvidiactl alone; the shell's SIGKILL
    # orphans the child, which is still the server's by its session.
    server = gpu_host.start('python3 tokenizer_worker.py', open_=['nvidiactl'], prefix=['sh', '-c', '"$@" & wait', 'sh'])
    foreign = gpu_host.start('python3 gpu_monitor.py', open_=['nvidiactl'])
    try:
        result = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                          scoped_args(gpu_host, driver_info, term_timeout=1, await_exit=[server.pid]))
        assert not result.failed, result['msg']
        assert result['awaited']['still_running'] == [server.pid]
        assert [(entry['pid'], entry['signal']) for entry in result['killed']] == [
            (server.pid, 'KILL'), (server.inner_pid, 'TERM')]
        assert [(entry['pid'], entry['why']) for entry in result['spared']] == [
            (foreign.inner_pid, 'shared devices only')]
        assert is_running(foreign)
        wait_gone(server.inner_pid)
    finally:
        end(server.inner_pid)


@pytest.mark.slow
def test_a_compute_app_left_on_its_gpus_fails_the_proof_under_the_memory_threshold(tmp_path, gpu_host):
    driver_info = gpu_host.write_driver_information(SWAPPED_MINORS)
    # A foreign job on both GPUs: spared (it holds GPU 1), and its 1 MiB on GPU 0 reads under max_used_mib.
    foreign = gpu_host.start('python3 foreign_job.py', hold=[(0, 1), (1, 1)])
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                      scoped_args(gpu_host, driver_info, max_used_mib=64, memory_timeout=0.5))
    assert result.failed and result['killed'] == [] and is_running(foreign)
    assert 'compute apps stayed on it (pid %d on GPU-sim-0000)' % foreign.inner_pid in result['msg']
    assert 'pid %d (other GPUs, holds' % foreign.inner_pid in result['msg']
    assert [(app['pid'], app['gpu_uuid']) for app in result['compute_apps']] == [(foreign.inner_pid, 'GPU-sim-0000')]


def test_gpus_the_machine_does_not_have_fail_before_anything_is_signalled(tmp_path, gpu_host):
    driver_info = gpu_host.write_driver_information()
    holder = gpu_host.start('python3 leaked_cuda_holder.py', hold=[(0, 1000)])
    result = run_task(tmp_path, 'gpuops.sglang.gpu_release',
                      release_args(gpu_host, gpus=[0, 'GPU-not-here'], driver_info=driver_info))
    assert result.failed and result['killed'] == [] and is_running(holder)
    assert 'GPU GPU-not-here is not on this machine' in result['msg'] and 'nothing was signalled' in result['msg']
    assert '1 GPU-sim-0001 (bus 0000:2a:00.0)' in result['msg']


def wait_gone(pid):
    def gone():
        record = read_proc_record(pid)
        return record is None or record.is_zombie
    wait_for(gone, what='pid %d to end' % pid)


def end(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
