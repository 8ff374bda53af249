"""A cancel ends every process of its run, the ssh clients that left ansible-playbook's process group included, and
nothing else: not another run's, not an ssh connection master another run may share (gpuops_dashboard.run_processes).

Real processes, marked as ansible-runner marks a run's (AWX_ISOLATED_DATA_DIR, inherited by all it starts)."""
import os
import subprocess
import sys
import time

from gpuops_dashboard import run_processes


def start(env_dir, argv=None, **kwargs):
    env = dict(os.environ, AWX_ISOLATED_DATA_DIR=os.path.join(str(env_dir), 'artifacts', 'ident'))
    return subprocess.Popen(argv or [sys.executable, '-c', 'import time; time.sleep(60)'], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)


def alive(proc):
    return proc.poll() is None


def test_a_cancel_ends_the_runs_processes_and_its_ssh_clients_in_their_own_sessions_and_nothing_else(tmp_path):
    run, other = tmp_path / 'run', tmp_path / 'other'
    playbook = start(run)
    # As ansible's ssh connection starts its clients: a session of their own, out of ansible-playbook's group.
    client = start(run, start_new_session=True)
    master = start(run, ['bash', '-c', 'exec -a "ssh: /root/.ansible/cp/0123abcd [mux]" sleep 60'],
                   start_new_session=True)
    bystander = start(other)
    try:
        deadline = time.monotonic() + 10
        # Until each process exec'd (its marks in /proc/PID/environ and cmdline).
        while set(run_processes.run_processes(str(run))) != {playbook.pid, client.pid}:
            assert time.monotonic() < deadline, run_processes.run_processes(str(run))
            time.sleep(0.05)
        assert run_processes.run_processes(str(other)) == [bystander.pid]
        ended = run_processes.end_run(str(run))
        assert sorted(ended) == sorted([playbook.pid, client.pid])
        for proc in (playbook, client):
            proc.wait(10)
        assert alive(master) and alive(bystander)
        assert run_processes.run_processes(str(run)) == [] and run_processes.end_run(str(run)) == []
    finally:
        for proc in (playbook, client, master, bystander):
            if alive(proc):
                proc.kill()
                proc.wait()
