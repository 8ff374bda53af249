import os
import signal
import subprocess
import sys

from ansible_collections.gpuops.sglang.plugins.module_utils.readers import _procfs as procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import ProcessRecord, terminate

# The child says "ready" only once its own code runs, that is after exec: reading
# /proc/PID/cmdline before that showed the parent's command line (a flaky test).
READY_CHILD = 'import sys, time; sys.stdout.write("ready\\n"); sys.stdout.flush(); time.sleep(60)'


def start_ready_child(*extra):
    child = subprocess.Popen([sys.executable, '-c', READY_CHILD] + list(extra), stdout=subprocess.PIPE)
    assert child.stdout.readline() == b'ready\n'
    return child


def stop(*procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_read_proc_record_of_real_process_with_title():
    child = start_ready_child('sglang::scheduler_TP0')
    try:
        rec = procfs.read_proc_record(child.pid)
        assert rec.pid == child.pid
        assert rec.ppid == os.getpid()
        assert rec.cmdline.endswith('time.sleep(60) sglang::scheduler_TP0')
        assert rec.start_time > 0
        started = rec.start_time
    finally:
        stop(child)
    # Gone: nothing, or (its PID reused by another process on a busy machine) not the same process.
    after = procfs.read_proc_record(child.pid)
    assert after is None or after.start_time != started


def test_parse_stat_copes_with_spaces_and_parentheses_in_comm():
    stat = '4242 (sglang::sch ed)) S 1 4242 4242 0 -1 4194560 ' + ' '.join(['0'] * 12) + ' 987654 0 0\n'
    assert procfs.parse_stat(stat) == ('sglang::sch ed)', 'S', 1, 987654)


def test_protected_pids_cover_self_and_ancestors():
    guarded = procfs.protected_pids()
    assert os.getpid() in guarded
    # getppid() is 0 where pytest is PID 1 of its namespace (a container without an init): no parent to see.
    if os.getppid():
        assert os.getppid() in guarded
    # The walk up from a child of ours reaches us, wherever pytest itself runs.
    child = start_ready_child()
    try:
        assert {child.pid, os.getpid()} <= procfs.protected_pids(pid=child.pid)
    finally:
        stop(child)


def test_local_source_finds_holders_of_a_file_and_kills_them(tmp_path):
    device = tmp_path / 'nvidia0'
    device.write_text('')
    # The holder takes SIGTERM's default action whatever it inherited: a pytest started with SIGTERM
    # ignored or blocked (a supervisor, `trap '' TERM`) passed that on, the holder outlived SIGTERM and
    # died of the SIGKILL five seconds later.
    holder = subprocess.Popen([sys.executable, '-c',
                               'import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_DFL); '
                               'signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM]); '
                               'f = open(sys.argv[1]); print("ok", flush=True); time.sleep(60)',
                               str(device)], stdout=subprocess.PIPE)
    bystander = start_ready_child()
    try:
        holder.stdout.readline()
        local = procfs.LocalProcesses()
        holders = local.holders([str(device)])
        assert holders == {holder.pid: [str(device)]}
        target = procfs.read_proc_record(holder.pid)
        outcome = terminate(local, [target], term_timeout=5)
        assert outcome.remaining == []
        assert holder.wait(timeout=5) == -signal.SIGTERM
        assert bystander.poll() is None
    finally:
        stop(holder, bystander)


def test_signal_skips_a_reused_pid_and_says_so():
    child = start_ready_child()
    try:
        current = procfs.read_proc_record(child.pid)
        # Same PID and command line, another start time: the process we once saw is gone.
        stale = ProcessRecord(child.pid, 1, 'S', current.cmdline, start_time=current.start_time - 1)
        assert procfs.LocalProcesses().signal([stale], 'KILL') == []
        assert procfs.LocalProcesses().alive([stale]) == []
        assert child.poll() is None
        assert procfs.LocalProcesses().alive([current]) != []
    finally:
        stop(child)
