"""A detached server is found by its pid file, or else by the marks its start put in its environment (a run whose
sglang_run_dir changed since); read from a fake /proc."""
import json
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import Server, ServerError

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
    # Two marked sessions (a server the stop missed beside the one started): the pid file names the server.
    process(tmp_path, 100, 100, MARKS)
    process(tmp_path, 300, 300, MARKS)
    pidfile = tmp_path / 'sglang.pid'
    pidfile.write_text('300')
    found = server(tmp_path, str(pidfile))
    assert found.main_pid() == 300 and found.pidfile_ignored is None


def stale_pidfile(tmp_path, pid):
    pidfile = tmp_path / 'sglang.pid'
    pidfile.write_text(str(pid))
    return server(tmp_path, str(pidfile))


@pytest.mark.parametrize('environment, uid, why', [
    ([], ME, 'carries neither the marks of the service sglang'),                     # a reused pid, this user's
    (MARKS, ME + 1000, 'runs as uid %d/%d/%d/%d' % ((ME + 1000,) * 4)),             # another user's, even marked
    (MARKS[:1], ME, 'carries neither'),                                               # the service, not this launch file
], ids=['unmarked', 'other-user', 'service-only'])
def test_a_pid_file_naming_another_process_is_ignored_and_the_marked_server_found(tmp_path, environment, uid, why):
    # A stale pid file (the server crashed; a reboot with the run dir on a persistent disk) whose pid was reused.
    process(tmp_path, 300, 300, environment, uid=uid)
    process(tmp_path, 301, 300, environment, uid=uid)
    process(tmp_path, 100, 100, MARKS)
    found = stale_pidfile(tmp_path, 300)
    assert found.main_pid() == 100
    assert sorted(record.pid for record in found.session_members()) == [100]
    assert why in found.pidfile_ignored and 'the pid file %s names process 300' % found.pidfile in found.pidfile_ignored


def test_a_pid_file_naming_another_process_with_no_marked_server_finds_nothing(tmp_path):
    process(tmp_path, 300, 300, uid=ME + 1000)
    found = stale_pidfile(tmp_path, 300)
    assert found.main_pid() is None and found.session_members() == []
    assert 'runs as uid' in found.pidfile_ignored


def test_what_is_left_of_a_session_whose_leader_is_gone_must_be_the_servers_too(tmp_path):
    # A crash leaves the leader's children in its session: they are the server's when they carry its marks.
    process(tmp_path, 301, 300, MARKS)
    assert [record.pid for record in stale_pidfile(tmp_path, 300).session_members()] == [301]
    process(tmp_path, 302, 300, uid=ME + 1000)
    found = stale_pidfile(tmp_path, 300)
    assert found.session_members() == [] and 'process 302 runs as uid' in found.pidfile_ignored


def launch_file(tmp_path, args):
    path = tmp_path / 'launch.json'
    path.write_text(json.dumps({'python': '/opt/sglang/bin/python3', 'module': 'sglang.launch_server', 'args': args,
                                'environment': {'CUDA_VISIBLE_DEVICES': '0'}}))
    return str(path)


LAUNCHED = b'/opt/sglang/bin/python3\0-m\0sglang.launch_server\0--port\x0030000\0--tp\x002\0'


@pytest.mark.parametrize('cmdline, uid, accepted', [
    (LAUNCHED, ME, True),                                                   # started by a release before the marks
    (LAUNCHED, ME + 1000, False),                                           # another user's: never
    (LAUNCHED.replace(b'30000', b'30001'), ME, False),                      # another server's arguments
    (LAUNCHED[:-1] + b'\0--extra\0', ME, False),                            # more arguments than the launch file's
    (b'python3\0-m\0sglang.launch_server\0', ME, False),
], ids=['same-command', 'other-user', 'other-port', 'more-args', 'other-python'])
def test_an_unmarked_pid_file_leader_is_the_server_only_when_it_runs_the_launch_files_command_as_this_user(
        tmp_path, cmdline, uid, accepted):
    proc = tmp_path / 'proc'
    process(proc, 300, 300, uid=uid)
    (proc / '300' / 'cmdline').write_bytes(cmdline)
    pidfile = tmp_path / 'sglang.pid'
    pidfile.write_text('300')
    found = Server('detached', 'sglang', launch_file(tmp_path, ['--port', 30000, '--tp', 2]), str(pidfile),
                   '/var/log/sglang/server.log', 'http://127.0.0.1:30000', proc_root=str(proc))
    assert found.main_pid() == (300 if accepted else None)
    assert (found.pidfile_ignored is None) == accepted


def test_the_command_line_alone_never_makes_a_marked_search_find_a_server(tmp_path):
    # Only the pid file's leader may be an unmarked server of an earlier release; the search wants the marks.
    proc = tmp_path / 'proc'
    process(proc, 300, 300)
    (proc / '300' / 'cmdline').write_bytes(LAUNCHED)
    found = Server('detached', 'sglang', launch_file(tmp_path, ['--port', 30000, '--tp', 2]), str(tmp_path / 'none.pid'),
                   '/var/log/sglang/server.log', 'http://127.0.0.1:30000', proc_root=str(proc))
    assert found.main_pid() is None


def test_two_marked_sessions_are_an_error_not_a_guess(tmp_path):
    process(tmp_path, 100, 100, MARKS)
    process(tmp_path, 300, 300, MARKS)
    with pytest.raises(ServerError, match='2 detached sessions were started for the service sglang from /etc/sglang/'
                                          'launch.json \\(pids 100, 300\\)'):
        server(tmp_path).main_pid()
