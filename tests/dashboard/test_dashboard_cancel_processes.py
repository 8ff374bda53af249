"""A cancel ends every process of its run, the ssh clients that left ansible-playbook's process group included, and
nothing else: not another run's, not an ssh connection master another run may share, not a server a module of
the run started on this machine (gpuops_dashboard.run_processes).

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


def cmdline(proc):
    with open('/proc/%d/cmdline' % proc.pid, 'rb') as handle:
        return handle.read()


def alive(proc):
    return proc.poll() is None


def test_a_cancel_ends_the_runs_processes_and_its_ssh_clients_in_their_own_sessions_and_nothing_else(tmp_path):
    run, other = tmp_path / 'run', tmp_path / 'other'
    playbook = start(run, ['bash', '-c', 'exec -a ansible-playbook sleep 60'])
    # As a venv runs it (python PATH/ansible-playbook ...); its forked workers carry the same command line.
    script = tmp_path / 'bin' / 'ansible-playbook'
    script.parent.mkdir()
    script.write_text('import time\ntime.sleep(60)\n')
    worker = start(run, [sys.executable, str(script), '-i', 'inventory'])
    # As ansible's ssh connection starts its clients: a session of their own, out of ansible-playbook's group.
    client = start(run, ['bash', '-c', 'exec -a ssh sleep 60'], start_new_session=True)
    master = start(run, ['bash', '-c', 'exec -a "ssh: /root/.ansible/cp/0123abcd [mux]" sleep 60'],
                   start_new_session=True)
    # What a module on the local connection started, detached: a server, a guard watcher. It carries the mark too.
    server = start(run, start_new_session=True)
    bystander = start(other, ['bash', '-c', 'exec -a ansible-playbook sleep 60'])
    try:
        deadline = time.monotonic() + 10
        # Until each process exec'd (its marks in /proc/PID/environ and cmdline).
        wanted = {(playbook.pid, 'ansible-playbook'), (worker.pid, 'ansible-playbook'), (client.pid, 'ssh')}
        while (set(run_processes.run_processes(str(run))) != wanted
               or run_processes.run_processes(str(other)) != [(bystander.pid, 'ansible-playbook')]
               or not cmdline(master).startswith(b'ssh: ') or not cmdline(server).startswith(sys.executable.encode())):
            assert time.monotonic() < deadline, (run_processes.run_processes(str(run)),
                                                 run_processes.run_processes(str(other)))
            time.sleep(0.05)
        ended = run_processes.end_run(str(run))
        assert sorted(pid for pid, kind in ended) == sorted([playbook.pid, worker.pid, client.pid])
        for proc in (playbook, worker, client):
            proc.wait(10)
        assert alive(master) and alive(server) and alive(bystander)
        assert run_processes.run_processes(str(run)) == [] and run_processes.end_run(str(run)) == []
    finally:
        for proc in (playbook, worker, client, master, server, bystander):
            if alive(proc):
                proc.kill()
                proc.wait()
