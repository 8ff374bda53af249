"""sglang_server's stop that does not wait (wait=false), against tiny_server.py run detached."""
import json
import os
import pwd
import signal
import subprocess
import sys

import pytest

from helpers.ansible_run import run_task
from helpers.http_responder import HttpResponder, Reply
from helpers.port_owner import Squatter
from helpers.simulated import wait_for
from helpers.tiny import TINY_SERVER, alive, session_members

SERVER_KEYS = {'changed', 'running', 'pid', 'healthy', 'stopped_at', 'stop_elapsed', 'stopping', 'strays', 'spared',
               'would_stop',
               'drain',
               'readiness', 'started_at', 'healthy_at', 'mismatches', 'server_info', 'cmd'}


@pytest.mark.slow
def test_a_stop_that_does_not_wait_returns_while_the_server_drains_and_lists_what_is_stopping(tmp_path, servers):
    hold = tmp_path / 'drain-hold'
    hold.write_text('')
    server = servers('a', '--drain-hold-file', str(hold))
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    marker = tmp_path / 'stopped_at'
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       server.args(state='stopped', wait=False, stop_marker=str(marker)), name='stop')
    assert not stopped.failed, stopped['msg']
    assert set(stopped) >= SERVER_KEYS
    assert stopped['changed'] is True and stopped['stopping'] == [started['pid']]
    assert float(marker.read_text()) == round(stopped['stopped_at'], 3)
    # Its drain is held open: the module returned with the server still running, signalled once.
    assert alive(started['pid'])
    hold.unlink()
    wait_for(lambda: not alive(started['pid']), what='the server to finish its drain and exit')

    again = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start again')
    assert not again.failed and again['healthy'] is True


@pytest.mark.slow
def test_a_stop_that_waits_lists_nothing_stopping(tmp_path, servers):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop')
    assert not stopped.failed and stopped['stopping'] == [] and not alive(started['pid'])


def started_with_child(tmp_path, servers):
    """A tiny server started through the module, with a child in its session that ignores SIGTERM."""
    server = servers('a', '--leave-child')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    wait_for(lambda: session_members(started['pid']), what='the child in its session')
    return server, started, session_members(started['pid'])


@pytest.mark.slow
def test_a_stop_that_does_not_wait_lists_the_whole_session(tmp_path, servers):
    server, started, child = started_with_child(tmp_path, servers)
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped', wait=False), name='stop')
    # The child ignores SIGTERM and is left behind by its parent: the awaiting step must know it.
    assert stopped['stopping'] == sorted([started['pid']] + child)
    for pid in child:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_stop_in_check_mode_lists_the_whole_session_with_users_and_stops_nothing(tmp_path, servers):
    server, started, child = started_with_child(tmp_path, servers)
    try:
        checked = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='check',
                           check=True)
        assert not checked.failed, checked['msg']
        assert set(checked) >= SERVER_KEYS and checked['changed'] is True and checked['stopping'] == []
        user = pwd.getpwuid(os.geteuid()).pw_name
        listed = dict((entry['pid'], entry) for entry in checked['would_stop'])
        assert sorted(listed) == sorted([started['pid']] + child)
        with open('/proc/%d/cmdline' % started['pid'], 'rb') as handle:
            command = handle.read().replace(b'\0', b' ').decode().strip()
        assert listed[started['pid']] == {'pid': started['pid'], 'user': user, 'cmdline': command, 'gpus': []}
        assert all(alive(pid) for pid in listed)
        # A real stop lists nothing it would stop: it stops.
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop')
        assert not stopped.failed and stopped['would_stop'] == []
    finally:
        for pid in child:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_stop_lists_the_strays_beside_the_server_and_leaves_them_running(tmp_path, servers):
    server, started, child = started_with_child(tmp_path, servers)
    # Outside the server's session, as an orphan of an earlier crash would be.
    marker = 'stray-of-%s' % tmp_path.name
    stray = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', marker], start_new_session=True)
    try:
        patterns = ['tiny_server --port %d' % server.port, 'SIG_IGN', marker]
        checked = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                           server.args(state='stopped', kill_patterns=patterns), name='check', check=True)
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                           server.args(state='stopped', wait=False, kill_patterns=patterns), name='stop')
        assert not stopped.failed, stopped['msg']
        for result in (checked, stopped):
            listed = [entry['pid'] for entry in result['strays']]
            # the server and the child of its session are its own, whatever they match
            assert started['pid'] not in listed and not set(child) & set(listed)
            assert [entry for entry in result['strays'] if marker in entry['cmdline']] == \
                [{'pid': stray.pid, 'cmdline': '%s -c import time; time.sleep(120) %s' % (sys.executable, marker)}]
        assert stray.poll() is None, 'a stray was signalled'
        wait_for(lambda: not alive(started['pid']), what='the server to exit')
    finally:
        stray.kill()
        stray.wait()
        for pid in child:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_stop_never_takes_a_neighbour_servers_processes_for_strays_under_the_same_user(tmp_path, servers):
    # Two servers of one machine, one user, one service name: told apart by their marks (--port, launch file).
    mine, neighbour = servers('a'), servers('b', '--leave-child')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', mine.args(state='started'), name='start a')
    theirs = run_task(tmp_path, 'gpuops.sglang.sglang_server', neighbour.args(state='started'), name='start b')
    assert not started.failed and not theirs.failed, (started.get('msg'), theirs.get('msg'))
    wait_for(lambda: session_members(theirs['pid']), what="the neighbour's child")
    their_child = session_members(theirs['pid'])
    marker = 'stray-of-%s' % tmp_path.name
    sleeper = [sys.executable, '-c', 'import time; time.sleep(120)', marker]
    # A leftover of mine (it inherited my marks, as an orphaned scheduler does) and one that carries nothing.
    my_leftover = subprocess.Popen(sleeper + ['mine'], start_new_session=True, env=dict(
        os.environ, GPUOPS_SGLANG_SERVICE='tiny', GPUOPS_SGLANG_LAUNCH_FILE=str(mine.launch)))
    unknown = subprocess.Popen(sleeper + ['unknown'], start_new_session=True)
    try:
        patterns = ['tiny_server --port', 'SIG_IGN', marker]
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', mine.args(
            state='stopped', kill_patterns=patterns,
            neighbours=[{'service_name': 'tiny', 'port': neighbour.port, 'launch_file': str(neighbour.launch),
                         'name': 'gpu1b'}]), name='stop a')
        assert not stopped.failed, stopped['msg']
        assert set(stopped) >= SERVER_KEYS
        # Other tests' servers run beside this one (and are spared too): only this test's processes are looked at.
        ours = set([theirs['pid'], unknown.pid, my_leftover.pid] + their_child)
        assert [entry['pid'] for entry in stopped['strays'] if entry['pid'] in ours] == [my_leftover.pid]
        spared = dict((entry['pid'], entry['why']) for entry in stopped['spared'] if entry['pid'] in ours)
        assert sorted(spared) == sorted([theirs['pid'], unknown.pid] + their_child)
        assert 'the neighbour server gpu1b' in spared[theirs['pid']] and '--port %d' % neighbour.port in spared[theirs['pid']]
        assert all('launch file %s' % neighbour.launch in spared[pid] for pid in their_child)
        assert 'may be theirs' in spared[unknown.pid]
        wait_for(lambda: not alive(started['pid']), what='my server to exit')
        # The neighbour serves on, untouched.
        assert all(alive(pid) for pid in [theirs['pid']] + their_child)
        again = run_task(tmp_path, 'gpuops.sglang.sglang_server', neighbour.args(state='started'), name='b still up')
        assert not again.failed and again['changed'] is False and again['pid'] == theirs['pid']
    finally:
        for process in (my_leftover, unknown):
            process.kill()
            process.wait()
        for pid in their_child:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_bad_stray_pattern_fails_before_anything_is_stopped(tmp_path, servers):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       server.args(state='stopped', kill_patterns=['sglang::(']), name='stop')
    assert stopped.failed and "invalid stray pattern 'sglang::('" in stopped['msg']
    assert set(stopped) >= SERVER_KEYS
    assert alive(started['pid'])


@pytest.mark.slow
def test_a_server_started_with_another_pid_file_is_found_and_stopped_gracefully(tmp_path, servers):
    # The review ran the role with sglang_run_dir changed: the server's pid file was in the old folder, the run
    # said "server not running", and the server was ended by the GPU release's signals, with no drain.
    hold = tmp_path / 'drain-hold'
    hold.write_text('')
    server = servers('a', '--drain-hold-file', str(hold))
    twin = servers('b')  # the same service name from another launch file: never taken for it
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', twin.args(state='started'), name='twin').failed
    moved = tmp_path / 'moved-run-dir'
    moved.mkdir()
    elsewhere = dict(pidfile=str(moved / 'tiny.pid'))
    info = run_task(tmp_path, 'gpuops.sglang.sglang_server_info', dict(
        (key, value) for key, value in server.args(**elsewhere).items()
        if key in ('service_name', 'launch_file', 'pidfile', 'url')), name='info')
    assert not info.failed, info['msg']
    assert info['running'] is True and info['pid'] == started['pid']
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped', wait=False, **elsewhere),
                       name='stop')
    assert not stopped.failed, stopped['msg']
    assert stopped['changed'] is True and stopped['stopping'] == [started['pid']]
    # SIGTERM began its drain (held open): it still runs, and answers 503 as SGLang does while draining.
    assert alive(started['pid'])
    hold.unlink()
    wait_for(lambda: not alive(started['pid']), what='the server to finish its drain and exit')
    assert run_task(tmp_path, 'gpuops.sglang.sglang_server', twin.args(state='stopped'), name='twin stop')['changed']


def foreign_session_leader():
    """`sleep 60` as nobody (uid 65534), leading its own session: what a reused pid in a stale pid file names."""
    return subprocess.Popen(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', 'sleep', '60'],
                            start_new_session=True)


@pytest.mark.slow
def test_a_stale_pid_file_naming_another_users_session_is_ignored_and_the_marked_server_stopped(tmp_path, servers):
    # The server crashed or the host rebooted with the run dir on a persistent disk: the pid in its pid file now
    # names an unrelated process. The stop must neither take it for the server nor signal its session.
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    foreign = foreign_session_leader()
    try:
        wait_for(lambda: alive(foreign.pid) and open('/proc/%d/status' % foreign.pid).read().count('\t65534') >= 4,
                 what='the foreign process to run as nobody')
        pidfile = server.root / 'tiny.pid'
        pidfile.write_text(str(foreign.pid))
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop')
        assert not stopped.failed, stopped['msg']
        assert stopped['changed'] is True and not alive(started['pid'])
        assert foreign.poll() is None, 'the process the stale pid file names was signalled'
        assert any('names process %d, which is not the server tiny' % foreign.pid in warning and 'runs as uid 65534' in warning
                   for warning in stopped.get('warnings', [])), stopped.get('warnings')
        # Nothing of the server left: the stale pid file names no server, and nothing is stopped.
        pidfile.write_text(str(foreign.pid))
        again = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop again')
        assert not again.failed and again['changed'] is False and again['pid'] is None
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


@pytest.mark.slow
def test_a_200_from_another_process_on_the_port_is_not_the_started_servers_health(tmp_path, servers):
    # A server the stop missed (or a late step's) answers on the port: the one started fails to bind and exits
    # ("address already in use"); the start must say so, not report healthy.
    server = servers('a')
    pidfile = server.root / 'tiny.pid'

    def health(request, match):
        # Answered only once the started server is gone, so a 200 never meets it alive.
        wait_for(lambda: pidfile.exists() and not alive(int(pidfile.read_text())), timeout=60,
                 what='the started server to exit')
        return Reply(200)

    with HttpResponder() as squatter:
        squatter.route('GET', '/health', handler=health)
        port = int(squatter.url.rsplit(':', 1)[1])
        server.url = squatter.url
        server.launch.write_text(json.dumps({'python': sys.executable, 'module': 'tiny_server', 'args': ['--port', port],
                                             'environment': {'PYTHONPATH': os.path.dirname(TINY_SERVER)}}))
        started = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                           server.args(state='started', health_interval=2, health_timeout=60),
                           name='start')
    assert started.failed
    assert 'did not become healthy: the server exited with status 1' in started['msg'], started['msg']
    assert 'port %d is held by PID %d (user %s, command ' % (port, os.getpid(), pwd.getpwuid(os.geteuid()).pw_name) \
        in started['msg'] and 'not by the started server' in started['msg']
    assert started['healthy'] is False and started['running'] is False


@pytest.mark.slow
def test_a_squatter_on_the_port_is_never_taken_for_the_started_server_nor_sent_its_key(tmp_path, servers):
    # Issue 41: while the new server loads its model (SGLang binds its port only after the load), a local user binds
    # the port first and answers as the server would (its settings can be read in /proc). The start took it for the
    # server: healthy, no mismatch, ready, and it sent the squatter the server's key on /server_info and
    # /health_generate.
    loading = tmp_path / 'model-loading'
    loading.write_text('')
    keys = tmp_path / 'server.yaml'
    keys.write_text('api-key: "the-servers-key"\n')
    keys.chmod(0o600)
    server = servers('a', '--load-hold-file', str(loading), '--config', str(keys))
    wanted = dict(expected_server_info={'max_running_requests': 1}, ready_checks=2, generate_probe=True)
    with Squatter(server.port, {'max_running_requests': 1, 'text': ' pong'}) as squatter:
        started = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                           server.args(state='started', health_timeout=3, health_interval=0.2, **wanted), name='start')
    assert started.failed and started['healthy'] is False and started['readiness'] is None
    assert ('the server tiny did not become healthy: port %d is held by PID %d (user %s, command %s -c '
            % (server.port, squatter.pid, pwd.getpwuid(squatter.uid).pw_name, squatter.python)) in started['msg'], \
        started['msg']
    assert started['msg'].endswith(', not by the started server')
    # Never asked: no /health believed, no key sent.
    assert squatter.requests == [] and 'Bearer the-servers-key' not in squatter.authorizations()
    # The squatter gone and the model loaded, the server binds its port: the same task now finds it its own.
    loading.unlink()
    again = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started', **wanted), name='again')
    assert not again.failed, again['msg']
    assert again['healthy'] is True and again['readiness']['ready'] is True and again['mismatches'] == []


def uids_of(pid):
    """The real, effective, saved and filesystem uids and gids of PID."""
    with open('/proc/%d/status' % pid) as handle:
        lines = dict(line.split(':', 1) for line in handle if line.startswith(('Uid:', 'Gid:')))
    return [int(value) for value in lines['Uid'].split()], [int(value) for value in lines['Gid'].split()]


@pytest.mark.slow
def test_a_detached_server_runs_as_its_user_and_is_found_and_stopped_only_as_that_users(tmp_path, servers):
    nobody = pwd.getpwnam('nobody')
    server = servers('a')
    # The system interpreter: the test's own lies under /root (0700), which nobody cannot enter.
    launch = json.loads(server.launch.read_text())
    server.launch.write_text(json.dumps(dict(launch, python='/usr/bin/python3')))
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started', user='nobody'),
                       name='start as nobody')
    try:
        assert not started.failed, started['msg']
        assert started['healthy'] is True
        # Dropped in the child before the exec: every uid and gid is nobody's, none is root's.
        assert uids_of(started['pid']) == ([nobody.pw_uid] * 4, [nobody.pw_gid] * 4)
        # A stop for root's server does not take nobody's session for it, whatever its marks say.
        as_root = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop as root')
        assert not as_root.failed and as_root['changed'] is False and alive(started['pid'])
        stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped', user='nobody'),
                           name='stop as nobody')
        assert not stopped.failed, stopped['msg']
        assert stopped['changed'] is True and not alive(started['pid'])
    finally:
        if not started.failed and alive(started['pid']):
            os.kill(started['pid'], signal.SIGKILL)


@pytest.mark.slow
def test_a_server_user_that_does_not_exist_fails_the_start_naming_it(tmp_path, servers):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       server.args(state='started', user='gpuops-no-such-user'), name='start')
    assert started.failed and 'the user gpuops-no-such-user does not exist on this host' in started['msg']
