"""sglang_server's stop that does not wait, and the leftovers of a detached server's session, with tiny_server.py."""
from helpers.ansible_run import run_task
from helpers.simulated import wait_for
from helpers.tiny import alive, session_members

SERVER_KEYS = {'changed', 'running', 'pid', 'healthy', 'stopped_at', 'stop_elapsed', 'stopping', 'leftovers', 'drain',
               'readiness', 'started_at', 'healthy_at', 'mismatches', 'server_info', 'cmd'}


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
    assert not again.failed and again['healthy'] is True and again['leftovers'] == []


def test_a_stop_that_waits_lists_nothing_stopping(tmp_path, servers):
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='stop')
    assert not stopped.failed and stopped['stopping'] == [] and not alive(started['pid'])


def test_what_a_gone_server_left_in_its_session_is_ended_before_it_starts_again(tmp_path, servers):
    server = servers('a', '--leave-child')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    wait_for(lambda: session_members(started['pid']), what='the child that ignores SIGTERM')
    child = session_members(started['pid'])
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped', wait=False), name='stop')
    assert stopped['stopping'] == sorted([started['pid']] + child)
    wait_for(lambda: not alive(started['pid']), what='the main process to exit')
    assert all(alive(pid) for pid in child)

    again = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started', term_timeout=1),
                     name='start again')
    assert not again.failed, again['msg']
    # It ignored SIGTERM: SIGKILL after term_timeout, before the new server started.
    assert [(entry['pid'], entry['signal']) for entry in again['leftovers']] == [(pid, 'KILL') for pid in child]
    assert not any(alive(pid) for pid in child)
    assert again['healthy'] is True and again['pid'] != started['pid']
