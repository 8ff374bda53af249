"""A cancel ends every process of its run, the workers and ssh clients that left ansible-playbook's process group
included, and nothing else: not another run's, not an ssh connection master another run may share, not a server a
module of the run started on this machine or an ssh that server started (gpuops_dashboard.run_processes).

Real processes, marked as ansible-runner marks a run's (AWX_ISOLATED_DATA_DIR, inherited by all it starts)."""
import os
import subprocess
import sys
import time

from gpuops_dashboard import run_processes

# A worker as ansible-core runs one: a session of its own, and an ssh client it started (in its session).
WORKER = '''
import os, subprocess, sys, time
os.setsid()
client = subprocess.Popen(['bash', '-c', 'exec -a ssh sleep 60'])
with open(sys.argv[1] + '.tmp', 'w') as handle:
    handle.write(str(client.pid))
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(60)
'''


def start(env_dir, argv=None, **kwargs):
    env = dict(os.environ, AWX_ISOLATED_DATA_DIR=os.path.join(str(env_dir), 'artifacts', 'ident'))
    return subprocess.Popen(argv or [sys.executable, '-c', 'import time; time.sleep(60)'], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)


def cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read()
    except OSError:
        return b''


def running(pid):
    """Alive and not a zombie."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            return handle.read().rsplit(b')', 1)[1].split()[0] != b'Z'
    except OSError:
        return False


def test_a_cancel_ends_the_runs_workers_and_their_ssh_clients_and_nothing_else(tmp_path):
    run, other, sibling = tmp_path / 'run', tmp_path / 'other', tmp_path / 'run-2'
    playbook = start(run, ['bash', '-c', 'exec -a ansible-playbook sleep 60'])
    # As a venv runs it (python PATH/ansible-playbook ...); its forked workers carry the same command line.
    script = tmp_path / 'bin' / 'ansible-playbook'
    script.parent.mkdir()
    script.write_text(WORKER)
    client_pid_file = tmp_path / 'client.pid'
    worker = start(run, [sys.executable, str(script), str(client_pid_file)])
    master = start(run, ['bash', '-c', 'exec -a "ssh: /root/.ansible/cp/0123abcd [mux]" sleep 60'],
                   start_new_session=True)
    # What a module on the local connection started, detached: a server (or a guard watcher), and an ssh it ran.
    server = start(run, start_new_session=True)
    servers_ssh = start(run, ['bash', '-c', 'exec -a ssh sleep 60'], start_new_session=True)
    bystanders = [start(other, ['bash', '-c', 'exec -a ansible-playbook sleep 60']),
                  start(sibling, ['bash', '-c', 'exec -a ansible-playbook sleep 60'])]
    spared = [master.pid, server.pid, servers_ssh.pid] + [proc.pid for proc in bystanders]
    client = None
    try:
        deadline = time.monotonic() + 10
        # Until each process exec'd (its marks in /proc/PID/environ and cmdline) and the worker started its client.
        while True:
            client = int(client_pid_file.read_text()) if client_pid_file.exists() else None
            wanted = {(playbook.pid, 'ansible-playbook'), (worker.pid, 'ansible-playbook'), (client, 'ssh')}
            if (client and cmdline(client).startswith(b'ssh\0') and set(run_processes.run_processes(str(run))) == wanted
                    and run_processes.run_processes(str(other)) == [(bystanders[0].pid, 'ansible-playbook')]
                    and cmdline(master.pid).startswith(b'ssh: ') and cmdline(servers_ssh.pid).startswith(b'ssh\0')
                    and cmdline(bystanders[1].pid).startswith(b'ansible-playbook')):
                break
            assert time.monotonic() < deadline, (client, run_processes.run_processes(str(run)))
            time.sleep(0.05)
        ended = run_processes.end_run(str(run))
        assert sorted(ended) == sorted(wanted)
        for proc in (playbook, worker):
            proc.wait(10)
        deadline = time.monotonic() + 10
        while running(client):
            assert time.monotonic() < deadline, 'the ssh client outlived the cancel'
            time.sleep(0.05)
        assert all(running(pid) for pid in spared)
        assert run_processes.run_processes(str(run)) == [] and run_processes.end_run(str(run)) == []
    finally:
        for pid in spared + [playbook.pid, worker.pid] + ([client] if client else []):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for proc in [playbook, worker, master, server, servers_ssh] + bystanders:
            proc.wait()
