"""A detached server is found by its pid file, or else by the marks its start put in its environment (a run whose
sglang_run_dir changed since); read from a fake /proc."""
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils._server import Server, ServerError

LAUNCH = '/etc/sglang/launch.json'
MARKS = ['GPUOPS_SGLANG_SERVICE=sglang', 'GPUOPS_SGLANG_LAUNCH_FILE=' + LAUNCH]
ME = os.geteuid()


def process(proc, pid, session, environment=(), uid=ME):
    base = proc / str(pid)
    base.mkdir(parents=True)
    (base / 'stat').write_text('%d (python3) S 1 %d %d 0 -1 4194560 %s 4242 0 0\n'
                               % (pid, session, session, ' '.join(['0'] * 12)))
    (base / 'cmdline').write_bytes(b'python3\0-m\0sglang.launch_server\0')
    (base / 'status').write_text('Name:\tpython3\nUid:\t%d\t%d\t%d\t%d\n' % ((uid,) * 4))
    (base / 'environ').write_bytes(b'\0'.join(item.encode() for item in ['PATH=/usr/bin'] + list(environment)) + b'\0')


def server(tmp_path, pidfile='/run/sglang-new/sglang.pid'):
    return Server('detached', 'sglang', LAUNCH, pidfile, '/var/log/sglang/server.log', 'http://127.0.0.1:30000',
                  proc_root=str(tmp_path))


def test_the_marked_session_is_the_server_when_the_pid_file_is_elsewhere(tmp_path):
    process(tmp_path, 100, 100, MARKS)
    process(tmp_path, 101, 100)           # its scheduler, same session
    process(tmp_path, 200, 200)           # anything else
    found = server(tmp_path)
    assert found.main_pid() == 100
    assert sorted(record.pid for record in found.session_members()) == [100, 101]


@pytest.mark.parametrize('environment, uid', [
    (MARKS[:1], ME),                                                      # the service, from another launch file
    (['GPUOPS_SGLANG_SERVICE=sglang', 'GPUOPS_SGLANG_LAUNCH_FILE=/etc/other/launch.json'], ME),
    (MARKS, ME + 1000),                                                   # another user's process, marked
], ids=['service-only', 'other-launch-file', 'other-user'])
def test_a_session_without_this_servers_marks_or_of_another_user_is_not_the_server(tmp_path, environment, uid):
    process(tmp_path, 100, 100, environment, uid=uid)
    assert server(tmp_path).main_pid() is None and server(tmp_path).session_members() == []


def test_the_pid_file_wins_over_a_mark(tmp_path):
    process(tmp_path, 100, 100, MARKS)
    process(tmp_path, 300, 300)
    pidfile = tmp_path / 'sglang.pid'
    pidfile.write_text('300')
    assert server(tmp_path, str(pidfile)).main_pid() == 300


def test_two_marked_sessions_are_an_error_not_a_guess(tmp_path):
    process(tmp_path, 100, 100, MARKS)
    process(tmp_path, 300, 300, MARKS)
    with pytest.raises(ServerError, match='2 detached sessions were started for the service sglang from /etc/sglang/'
                                          'launch.json \\(pids 100, 300\\)'):
        server(tmp_path).main_pid()
