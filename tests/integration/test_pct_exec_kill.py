"""pct_exec_kill through the pct simulator into a real PID namespace."""
import os
import pwd
import subprocess

import pytest

from helpers import faults
from helpers.ansible_run import run_task
from helpers.simulated import SimulatedContainer, SimulatedGpuHost, gate_opened_by_first_call, is_running, wait_for

KEYS = {'changed', 'killed', 'targets', 'remaining', 'cmd', 'vmid', 'awaited', 'elapsed'}
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
    # The dry run's list: each with its user, read inside the container (its uid, its /etc/passwd).
    user = pwd.getpwuid(os.geteuid()).pw_name
    listed = dict((entry['pid'], entry) for entry in result['targets'])
    for name, title in (('launcher', LAUNCHER), ('scheduler', 'sglang::scheduler_TP0'),
                        ('detokenizer', 'sglang::detokenizer')):
        entry = listed.pop(procs[name].inner_pid)
        assert (entry['user'], entry['gpus']) == (user, []) and entry['cmdline'].startswith(title)
    assert listed == {}


@pytest.mark.slow
def test_await_exit_lets_the_draining_launcher_exit_by_itself_before_the_rest_is_stopped(tmp_path, lab):
    host, container = lab
    # Its drain lasts until 0.5 s after the module's first pct call (pct status, just before the wait).
    gate = str(tmp_path / 'drain-gate')
    open(gate, 'w').close()
    launcher = host.start(LAUNCHER, on_term='gate=' + gate, prefix=container.nsenter)
    detokenizer = host.start('sglang::detokenizer', prefix=container.nsenter)
    # The stop that did not wait (sglang_server wait=false, systemd's stop job): SIGTERM to the launcher only.
    subprocess.run(container.nsenter + ['kill', '-TERM', str(launcher.inner_pid)], check=True)
    pct = gate_opened_by_first_call(tmp_path, container.pct, gate)
    args = {'vmid': 101, 'pct': pct, 'term_timeout': 5, 'await_exit': [launcher.inner_pid]}
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', args, name='kill')
    assert not result.failed, result['msg']
    assert result['awaited']['pids'] == [launcher.inner_pid] and result['awaited']['still_running'] == []
    assert result['awaited']['waited_s'] > 0 and result['awaited']['gone_at'] is not None
    # The launcher finished its drain unsignalled; what it left behind was stopped as usual.
    assert [(entry['pid'], entry['signal']) for entry in result['killed']] == [(detokenizer.inner_pid, 'TERM')]
    assert launcher.wait(timeout=5) == 0
    detokenizer.wait(timeout=5)
    assert result['elapsed'] > 0 and result['remaining'] == []


@pytest.mark.slow
def test_kill_escalates_inside_the_namespace_and_is_idempotent(tmp_path, lab):
    procs = start_in_container(lab)
    args = {'vmid': 101, 'pct': lab[1].pct, 'term_timeout': 3}
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
    # the last command is the listing that proved no match is left
    assert result['cmd'][-1][-1] == 'gpuops-sglang-list'

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


def start_faulty(lab, tmp_path, name, title, on_term, child_title=None):
    """A misbehaving process inside the container; returns (Popen, inner PID, child ready file)."""
    ready = tmp_path / ('%s.ready' % name)
    child_ready = tmp_path / ('%s.child.ready' % name)
    proc = subprocess.Popen(lab[1].nsenter + faults.faulty_argv(title, on_term, ready, child_title, child_ready),
                            start_new_session=True)
    wait_for(ready.exists, what=name)
    return proc, int(ready.read_text()), child_ready


def inner_alive(lab, inner_pid):
    """Whether PID (as the container numbers it) still runs, read in the container's own /proc."""
    out = subprocess.run(lab[1].nsenter + ['cat', '/proc/%d/stat' % inner_pid], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, universal_newlines=True).stdout
    return bool(out) and out.rsplit(')', 1)[1].split()[0] not in ('Z', 'X')


@pytest.mark.slow
def test_child_forked_during_shutdown_is_found_and_stopped(tmp_path, lab):
    parent, parent_pid, child_ready = start_faulty(lab, tmp_path, 'launcher', LAUNCHER, 'fork',
                                                   child_title='sglang::detokenizer')
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': lab[1].pct, 'term_timeout': 3})
    assert not result.failed, result['msg']
    child_pid = int(child_ready.read_text())
    signals = dict((entry['pid'], entry['signal']) for entry in result['killed'])
    # the child ignores SIGTERM: found by a later listing, it is followed until SIGKILL ends it
    assert signals == {parent_pid: 'TERM', child_pid: 'KILL'}
    assert result['remaining'] == [] and not inner_alive(lab, child_pid)


@pytest.mark.slow
def test_process_that_retitles_itself_on_term_still_gets_kill(tmp_path, lab):
    proc, pid, _ = start_faulty(lab, tmp_path, 'scheduler', 'sglang::scheduler_TP0', 'retitle')
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': lab[1].pct, 'term_timeout': 3})
    assert not result.failed, result['msg']
    assert result['killed'] == [{'pid': pid, 'cmdline': 'python3 draining %s --titled --on-term ignore'
                                 % faults.FAULTY_PROCESS, 'signal': 'KILL'}]
    assert proc.wait(timeout=10) is not None


@pytest.mark.slow
def test_a_pattern_matching_everything_spares_pid_1_and_its_own_shells(tmp_path, lab):
    procs = start_in_container(lab)
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill',
                      {'vmid': 101, 'pct': lab[1].pct, 'kill_patterns': ['.'], 'term_timeout': 2}, name='all')
    assert not result.failed, result['msg']
    inside = ('launcher', 'scheduler', 'detokenizer', 'unrelated')
    assert sorted(entry['pid'] for entry in result['killed']) == sorted(procs[name].inner_pid for name in inside)
    assert 1 not in [entry['pid'] for entry in result['killed']]
    assert inner_alive(lab, 1) and is_running(procs['outside'])
    assert any('is the container\'s init' in warning for warning in result.get('warnings', []))


def test_its_own_listing_is_never_a_target(tmp_path, lab):
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill',
                      {'vmid': 101, 'pct': lab[1].pct, 'kill_patterns': ['gpuops-sglang', r'/proc/\[0-9\]']})
    assert not result.failed and result['killed'] == [] and result['changed'] is False


def test_listing_needs_no_procps_in_the_container(tmp_path, lab):
    procs = start_in_container(lab)
    bare = faults.minimal_path(tmp_path / 'bare-bin')
    assert not os.path.exists(os.path.join(bare, 'ps'))
    pct = faults.pct_wrapper(tmp_path / 'pct-no-procps', lab[1].pct, path_dirs=bare)
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': pct, 'term_timeout': 0})
    assert not result.failed, result['msg']
    assert sorted(entry['pid'] for entry in result['killed']) == sorted(
        procs[name].inner_pid for name in ('launcher', 'scheduler', 'detokenizer'))


@pytest.mark.slow
def test_hung_pct_exec_is_killed_at_command_timeout_and_nothing_is_signalled(tmp_path, lab):
    procs = start_in_container(lab)
    pid_file = tmp_path / 'hung-pct.pid'
    pct = faults.pct_wrapper(tmp_path / 'pct-frozen', lab[1].pct, hang_exec_pid_file=pid_file)
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': pct, 'command_timeout': 1})
    assert result.failed and set(result) >= KEYS
    assert '`%s exec 101 -- /bin/sh -c <script> gpuops-sglang-list` timed out after 1s' % pct in result['msg']
    assert 'nothing was signalled' in result['msg'] and result['killed'] == []
    assert all(is_running(proc) for proc in procs.values())
    assert not os.path.exists('/proc/%s' % pid_file.read_text().strip())


def test_empty_patterns_are_refused(tmp_path, lab):
    procs = start_in_container(lab)
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101, 'pct': lab[1].pct, 'kill_patterns': []})
    assert result.failed and 'patterns is empty' in result['msg'] and set(result) >= KEYS
    assert all(is_running(proc) for proc in procs.values())


def test_missing_pct_binary(tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', {'vmid': 101})
    assert result.failed and 'pct was not found on PATH' in result['msg']


def marked(service, launch_file):
    """A prefix that starts a process with the marks a detached start gives a server's processes (its children
    inherit them)."""
    return ['env', 'GPUOPS_SGLANG_SERVICE=%s' % service, 'GPUOPS_SGLANG_LAUNCH_FILE=%s' % launch_file]


@pytest.mark.slow
def test_two_servers_in_one_container_under_one_user_the_kill_ends_only_its_servers(tmp_path, lab):
    host, container = lab
    mine = 'python3 -m sglang.launch_server --model-path /models/a --port 30000'
    theirs = 'python3 -m sglang.launch_server --model-path /models/b --port 30001'
    procs = {
        'my launcher': host.start(mine, prefix=container.nsenter + marked('sglang', '/etc/sglang/launch.json')),
        'my scheduler': host.start('sglang::scheduler_TP0', on_term='ignore',
                                   prefix=container.nsenter + marked('sglang', '/etc/sglang/launch.json')),
        'their launcher': host.start(theirs, prefix=container.nsenter + marked('sglang-b', '/etc/sglang-b/launch.json')),
        'their scheduler': host.start('sglang::scheduler_TP0',
                                      prefix=container.nsenter + marked('sglang-b', '/etc/sglang-b/launch.json')),
        # An orphaned scheduler that carries nothing: with a neighbour declared, it may be theirs.
        'unknown scheduler': host.start('sglang::scheduler_TP1', prefix=container.nsenter),
    }
    args = {'vmid': 101, 'pct': container.pct, 'term_timeout': 3,
            'marks': {'service_name': 'sglang', 'port': 30000, 'launch_file': '/etc/sglang/launch.json', 'name': 'gpu1'},
            'neighbours': [{'service_name': 'sglang-b', 'port': 30001, 'launch_file': '/etc/sglang-b/launch.json',
                            'name': 'gpu1b'}]}
    checked = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', args, name='check', check=True)
    result = run_task(tmp_path, 'gpuops.sglang.pct_exec_kill', args, name='kill')
    assert not checked.failed and not result.failed, (checked.get('msg'), result.get('msg'))
    assert set(result) >= KEYS | {'spared'}
    for outcome in (checked, result):
        assert sorted(entry['pid'] for entry in outcome['killed']) == sorted(
            procs[name].inner_pid for name in ('my launcher', 'my scheduler'))
        spared = dict((entry['pid'], entry['why']) for entry in outcome['spared'])
        assert sorted(spared) == sorted(procs[name].inner_pid for name in
                                        ('their launcher', 'their scheduler', 'unknown scheduler'))
        assert 'neighbour server gpu1b' in spared[procs['their scheduler'].inner_pid]
        assert 'may be theirs' in spared[procs['unknown scheduler'].inner_pid]
    assert result['remaining'] == []
    procs['my launcher'].wait(timeout=5)
    procs['my scheduler'].wait(timeout=5)
    assert all(is_running(procs[name]) for name in ('their launcher', 'their scheduler', 'unknown scheduler'))
