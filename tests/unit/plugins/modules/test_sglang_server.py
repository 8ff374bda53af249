"""sglang_server's main() in-process: the detached manager on a real local server (tiny_server.py) run
from a tiny launch.json, and the systemd manager through a scripted systemctl with a responder as the server."""
import json
import os
import shutil
import sys

import pytest

from helpers.http_responder import http_responder  # noqa: F401  (the fixture)
from helpers.http_responder import static_server_launch
from helpers.module_runner import run_module  # noqa: F401  (the fixture)
from helpers.module_runner import kill_children_naming, processes_naming
from helpers.simulated import free_port, wait_for
from helpers.tiny import alive
from ansible_collections.gpuops.sglang.plugins.modules import sglang_server

TINY_SERVER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), 'integration', 'files')
KEYS = {'changed', 'activated', 'running', 'pid', 'healthy', 'health_attempts', 'stopped_at', 'stop_elapsed', 'stopping',
        'strays', 'drain', 'readiness', 'started_at', 'healthy_at', 'mismatches', 'server_info', 'cmd'}
SYSTEMCTL = 'systemctl'


def no_commands(argv):
    raise AssertionError('the detached manager ran a command: %r' % argv)


LOADS_IDLE = {'aggregate': {'total_running_reqs': 0, 'total_waiting_reqs': 0, 'total_reqs': 0}}
SITE = {'/health': {}, '/health_generate': {}, '/server_info': {'max_running_requests': 64}, '/v1/loads': LOADS_IDLE}


class Tiny(object):
    """A detached SGLang server stand-in from a launch.json, with its pid file and log in tmp_path, on a free port.

    By default Python's http.server serving SITE's documents (it exits at SIGTERM at once); write_launch()
    makes it tests/integration/files/tiny_server.py instead, for a drain held open or a real generation.
    """

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.port = free_port()
        self.launch = tmp_path / 'launch.json'
        self.pidfile = tmp_path / 'tiny.pid'
        self.url = self.serve(SITE)

    def serve(self, documents, without=()):
        shutil.rmtree(str(self.root / 'site'), ignore_errors=True)
        documents = dict((path, document) for path, document in documents.items() if path not in without)
        return static_server_launch(self.launch, self.root / 'site', self.port, documents)

    def write_launch(self, *extra):
        self.launch.write_text(json.dumps({
            'python': sys.executable, 'module': 'tiny_server',
            'args': ['--port', self.port, '--max-running-requests', 64] + list(extra),
            'environment': {'PYTHONPATH': TINY_SERVER_DIR}}))

    def args(self, **extra):
        base = dict(manager='detached', service_name='tiny', launch_file=str(self.launch),
                    pidfile=str(self.pidfile), log_file=str(self.root / 'tiny.log'), url=self.url,
                    term_timeout=5, health_timeout=20, health_interval=0.05)
        base.update(extra)
        return base

    def run(self, run_module, check_mode=False, **extra):
        result, calls = run_module(sglang_server.main, self.args(**extra), no_commands, check_mode=check_mode)
        return result

    def start(self, run_module, **extra):
        started = self.run(run_module, state='started', **extra)
        assert not started['failed'], started['msg']
        return started

    def running(self):
        """The servers this test started, by their command lines."""
        return processes_naming('--port %d ' % self.port) + processes_naming(str(self.root / 'site'))

    def kill_everything_started(self):
        kill_children_naming('--port %d ' % self.port)
        kill_children_naming(str(self.root / 'site'))


@pytest.fixture
def tiny(tmp_path):
    made = Tiny(tmp_path)
    yield made
    made.kill_everything_started()


def test_started_starts_waits_for_health_and_a_second_run_changes_nothing(run_module, tiny):
    started = tiny.start(run_module, expected_server_info={'max_running_requests': 64})
    assert set(started) >= KEYS and started['changed'] is True
    assert started['running'] is True and started['healthy'] is True and alive(started['pid'])
    assert int(tiny.pidfile.read_text()) == started['pid']
    assert started['healthy_at'] >= started['started_at'] and started['health_attempts'] >= 1
    assert started['server_info'] == {'max_running_requests': 64} and started['mismatches'] == []
    assert started['cmd'] == [] and started['stopped_at'] is None

    again = tiny.start(run_module, expected_server_info={'max_running_requests': 64})
    assert again['changed'] is False and again['pid'] == started['pid'] and again['started_at'] is None
    assert set(again) == set(started)


@pytest.mark.parametrize('state, changed', [('started', True), ('restarted', True), ('stopped', False)])
def test_check_mode_on_a_stopped_server_says_what_would_change_and_starts_nothing(run_module, tiny, state,
                                                                                  changed):
    checked = tiny.run(run_module, check_mode=True, state=state)
    assert not checked['failed'] and checked['changed'] is changed and set(checked) >= KEYS
    assert checked['running'] is False and checked['pid'] is None and not tiny.pidfile.exists()
    assert tiny.running() == []


@pytest.mark.parametrize('state, changed', [('started', False), ('restarted', True), ('stopped', True)])
def test_check_mode_on_a_running_server_changes_nothing(run_module, tiny, state, changed):
    started = tiny.start(run_module)
    checked = tiny.run(run_module, check_mode=True, state=state)
    assert not checked['failed'] and checked['changed'] is changed
    assert checked['running'] is True and checked['pid'] == started['pid'] and checked['healthy'] is True
    assert alive(started['pid']) and int(tiny.pidfile.read_text()) == started['pid']


def test_check_mode_reports_a_mismatch_as_a_change(run_module, tiny):
    tiny.start(run_module)
    checked = tiny.run(run_module, check_mode=True, state='started', expected_server_info={'max_running_requests': 96})
    assert not checked['failed'] and checked['changed'] is True
    assert checked['mismatches'] == ['max_running_requests is 64, want 96']
    assert checked['server_info'] == {'max_running_requests': 64}


def test_a_server_reporting_other_settings_fails_naming_them(run_module, tiny):
    result = tiny.run(run_module, state='started', expected_server_info={'max_running_requests': 96},
                      expected_environment={'SGLANG_X': '1'})
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'] == ('the server tiny reports other settings than wanted: max_running_requests is 64, '
                             'want 96; environment SGLANG_X is null, want "1"')
    assert result['running'] is True and result['healthy'] is True


def test_stopped_waits_for_the_exit_writes_the_marker_and_a_second_stop_changes_nothing(run_module, tiny):
    started = tiny.start(run_module)
    marker = tiny.root / 'stopped_at'
    stopped = tiny.run(run_module, state='stopped', stop_marker=str(marker))
    assert not stopped['failed'], stopped['msg']
    assert set(stopped) >= KEYS and stopped['changed'] is True
    assert stopped['running'] is False and stopped['pid'] is None and stopped['stopping'] == []
    assert not alive(started['pid']) and not tiny.pidfile.exists()
    assert float(marker.read_text()) == round(stopped['stopped_at'], 3) and stopped['stop_elapsed'] >= 0

    again = tiny.run(run_module, state='stopped', stop_marker=str(marker))
    assert not again['failed'] and again['changed'] is False and again['stopped_at'] is None
    assert float(marker.read_text()) == round(stopped['stopped_at'], 3)
    assert set(again) == set(stopped)


def test_stopped_without_waiting_returns_while_the_server_drains(run_module, tiny):
    hold = tiny.root / 'drain-hold'
    hold.write_text('')
    tiny.write_launch('--drain-hold-file', str(hold))
    started = tiny.start(run_module)
    stopped = tiny.run(run_module, state='stopped', wait=False)
    assert not stopped['failed'], stopped['msg']
    assert stopped['changed'] is True and stopped['stopping'] == [started['pid']] and stopped['stopped_at']
    # Its drain is held open: the module returned with the server still there, told to stop.
    assert alive(started['pid'])
    hold.unlink()
    wait_for(lambda: not alive(started['pid']), 10, 'the server to finish its drain and exit')


def test_restarted_stops_the_running_server_and_starts_a_new_one(run_module, tiny):
    started = tiny.start(run_module)
    restarted = tiny.run(run_module, state='restarted')
    assert not restarted['failed'], restarted['msg']
    assert restarted['changed'] is True and restarted['healthy'] is True
    assert restarted['stopped_at'] is not None and restarted['started_at'] >= restarted['stopped_at']
    assert restarted['pid'] != started['pid'] and not alive(started['pid']) and alive(restarted['pid'])


def test_a_server_that_never_answers_health_fails_at_the_health_timeout(run_module, tiny):
    tiny.serve(SITE, without=['/health'])
    # Long enough for the stand-in to bind its port on a loaded machine (0.3 s read "no answer" once in CI): the
    # last answer is then its 404.
    result = tiny.run(run_module, state='started', health_timeout=3)
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'] == ('the server tiny did not become healthy: /health did not answer 200 within 3.0s '
                             '(last: 404)')
    assert result['changed'] is True and result['running'] is True and result['healthy'] is False


def test_a_server_that_exits_at_once_fails_without_waiting_for_the_health_timeout(run_module, tiny):
    tiny.launch.write_text(tiny.launch.read_text().replace('"--bind"', '"--no-such-flag"'))
    result = tiny.run(run_module, state='started', health_timeout=600)
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'] == ('the server tiny did not become healthy: the server exited with status 2; see %s'
                             % (tiny.root / 'tiny.log'))
    assert result['running'] is False and result['pid'] is None


def test_a_launch_configuration_naming_no_interpreter_fails_with_every_key(run_module, tiny):
    tiny.launch.write_text(json.dumps({'python': str(tiny.root / 'no-python'), 'module': 'tiny_server'}))
    result = tiny.run(run_module, state='started')
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'].startswith('sglang_server started of tiny failed: could not run %s'
                                    % (tiny.root / 'no-python'))


@pytest.mark.parametrize('bad', [dict(health_interval=0), dict(term_timeout=-1), dict(drain_timeout=-1),
                                 dict(ready_checks=-1), dict(health_timeout=-1)])
def test_bad_timings_are_refused_before_anything_runs(run_module, tiny, bad):
    result = tiny.run(run_module, state='started', **bad)
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'].startswith('health_interval must be above 0; health_timeout, term_timeout,')
    assert not tiny.pidfile.exists() and tiny.running() == []


def test_a_bad_stray_pattern_fails_before_anything_is_stopped(run_module, tiny):
    started = tiny.start(run_module)
    result = tiny.run(run_module, state='stopped', kill_patterns=['sglang::('])
    assert result['failed'] and set(result) >= KEYS and "invalid stray pattern 'sglang::('" in result['msg']
    assert alive(started['pid'])


def test_a_drain_reads_the_load_before_the_stop(run_module, tiny):
    tiny.start(run_module)
    stopped = tiny.run(run_module, state='stopped', drain_timeout=5)
    assert not stopped['failed'], stopped['msg']
    drain = stopped['drain']
    assert (drain['idle'], drain['in_flight_at_start'], drain['in_flight_at_end'], drain['source'], drain['why']) == \
        (True, 0, 0, '/v1/loads', None)


def test_a_server_that_reports_no_load_is_stopped_at_once_with_a_warning(run_module, tiny):
    tiny.serve(SITE, without=['/v1/loads'])
    tiny.start(run_module)
    stopped = tiny.run(run_module, state='stopped', drain_timeout=600)
    assert not stopped['failed'], stopped['msg']
    assert stopped['changed'] is True and stopped['drain']['idle'] is False
    assert stopped['drain']['why'] == ('the server reports no load (neither /v1/loads nor /get_load exists), so its '
                                       'drain cannot be seen')


def test_ready_checks_and_a_generation_follow_health(run_module, tiny):
    tiny.write_launch()
    started = tiny.start(run_module, ready_checks=2, generate_probe=True)
    readiness = started['readiness']
    assert readiness['ready'] is True and readiness['path'] == '/health_generate' and readiness['attempts'] >= 2
    assert readiness['generate']['ok'] is True and readiness['generate']['status'] == 200


def test_a_healthy_server_whose_generation_fails_is_not_ready(run_module, tiny):
    tiny.write_launch('--broken-generate')
    result = tiny.run(run_module, state='started', generate_probe=True)
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'] == 'the server tiny is healthy but not ready: POST /generate answered 500'
    assert result['healthy'] is True and result['readiness']['ready'] is False


def test_a_rank_without_http_is_started_and_healthy_while_it_runs_without_a_request(run_module, tiny):
    # A rank > 0 of a server spanning several hosts (url ""): the group is verified on rank 0, so neither
    # /server_info nor the readiness checks are asked for here, though the role's defaults name them.
    tiny.write_launch()
    started = tiny.start(run_module, url='', expected_server_info={'max_running_requests': 99}, ready_checks=2,
                         generate_probe=True)
    assert set(started) >= KEYS and started['changed'] is True
    assert started['running'] is True and started['healthy'] is True and alive(started['pid'])
    assert started['server_info'] == {} and started['mismatches'] == [] and started['readiness'] is None

    stopped = tiny.run(run_module, state='stopped', url='', drain_timeout=5)
    assert not stopped['failed'] and stopped['changed'] is True and stopped['drain'] is None
    assert not alive(started['pid'])


def test_a_rank_without_http_that_exits_at_once_fails_without_waiting(run_module, tiny):
    tiny.launch.write_text(json.dumps({'python': sys.executable, 'module': 'no_such_module_here', 'args': [],
                                       'environment': {}}))
    result = tiny.run(run_module, state='started', url='', health_timeout=60)
    assert result['failed'] and set(result) >= KEYS and result['healthy'] is False
    assert 'did not become healthy' in result['msg']


# --- the systemd manager: systemctl scripted at the command edge, the server a responder ---------------------

class Systemd(object):
    """Answers systemctl as systemd would for one unit whose main PID is `pid` (0: not running); once started, its
    main process is this test's, which holds the responder's listening socket (the port is the server's)."""

    def __init__(self, pid=0, stop_rc=0):
        self.pid = pid
        self.stop_rc = stop_rc

    def __call__(self, argv):
        assert argv[0] == SYSTEMCTL, argv
        if argv[1] == 'show' and argv[2] == '--property=MainPID':
            return 0, '%d\n' % self.pid, ''
        if argv[1] == 'show' and argv[2] == '--property=ControlGroup':
            return 0, '/system.slice/sglang.service\n', ''
        if argv[1] == 'show':
            return 0, 'ActiveState=active\nResult=success\n', ''
        if argv[1] == 'stop':
            if self.stop_rc:
                return self.stop_rc, '', 'Failed to stop sglang.service: Access denied\n'
            self.pid = 0
            return 0, '', ''
        if argv[1] == 'start':
            self.pid = os.getpid()
            return 0, '', ''
        if argv[1] in ('enable', 'daemon-reload'):
            return 0, '', ''
        raise AssertionError('unexpected systemctl call %r' % argv)


def systemd_args(tmp_path, url, **extra):
    base = dict(manager='systemd', service_name='sglang', launch_file=str(tmp_path / 'launch.json'),
                pidfile=str(tmp_path / 'sglang.pid'), log_file=str(tmp_path / 'sglang.log'), url=url,
                health_timeout=5, health_interval=0.05)
    base.update(extra)
    return base


def test_a_systemd_start_enables_starts_and_waits_for_health(run_module, tmp_path, http_responder):
    http_responder.route('GET', '/health', status=200)
    result, calls = run_module(sglang_server.main, systemd_args(tmp_path, http_responder.url, daemon_reload=True),
                               Systemd(pid=0))
    assert not result['failed'], result['msg']
    assert result['changed'] is True and result['healthy'] is True and result['pid'] == os.getpid()
    # What changes systemd, in order (the reads of the unit's state in between are the module's own affair).
    assert [call for call in calls if call[1] != 'show'] == [[SYSTEMCTL, 'daemon-reload'],
                                                             [SYSTEMCTL, 'enable', '--no-reload', 'sglang'],
                                                             [SYSTEMCTL, 'start', 'sglang']]
    assert result['cmd'] == calls


@pytest.mark.parametrize('wait, argv, stopping', [
    (True, [SYSTEMCTL, 'stop', 'sglang'], []),
    (False, [SYSTEMCTL, 'stop', '--no-block', 'sglang'], [4711]),
])
def test_a_systemd_stop_asks_systemctl(run_module, tmp_path, http_responder, wait, argv, stopping):
    result, calls = run_module(sglang_server.main, systemd_args(tmp_path, http_responder.url, state='stopped',
                                                                wait=wait), Systemd(pid=4711))
    assert not result['failed'], result['msg']
    assert result['changed'] is True and argv in calls and result['stopping'] == stopping
    assert http_responder.requests == []


def test_a_systemd_unit_that_does_not_run_is_not_stopped(run_module, tmp_path, http_responder):
    result, calls = run_module(sglang_server.main, systemd_args(tmp_path, http_responder.url, state='stopped'),
                               Systemd(pid=0))
    assert not result['failed'] and result['changed'] is False and result['stopped_at'] is None
    assert [call for call in calls if call[1] != 'show'] == []


def test_a_failing_systemctl_stop_is_a_clear_failure_with_every_key(run_module, tmp_path, http_responder):
    result, calls = run_module(sglang_server.main, systemd_args(tmp_path, http_responder.url, state='stopped'),
                               Systemd(pid=4711, stop_rc=1))
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'] == ('sglang_server stopped of sglang failed: systemctl stop sglang failed (rc 1): '
                             'Failed to stop sglang.service: Access denied')


def test_a_stop_whose_systemctl_hangs_fails_rather_than_finding_nothing_to_stop(run_module, tmp_path,
                                                                                 http_responder):
    def hung(argv):
        return 124, '', ''
    result, calls = run_module(sglang_server.main, systemd_args(tmp_path, http_responder.url, state='stopped'), hung)
    assert result['failed'] and set(result) >= KEYS
    assert 'systemctl' in result['msg']


def armed_guard(folder, run_id='run-1', idle=90.0):
    """A guard's state.json as sglang_guard writes it (the fields the lease reads)."""
    folder.mkdir()
    (folder / 'state.json').write_text(json.dumps({'run_id': run_id, 'armed_at': 1000.0, 'deadline': 99999999999.0,
                                                   'idle': idle}))
    return {'folder': str(folder), 'run_id': run_id}


def test_a_restart_moves_the_candidates_into_place_before_it_starts(run_module, tiny, tmp_path):
    tiny.start(run_module)
    live, candidate = tmp_path / 'unit.conf', tmp_path / 'unit.conf.next'
    live.write_text('old\n')
    candidate.write_text('new\n')
    restarted = tiny.run(run_module, state='restarted', activate=[
        {'candidate': str(candidate), 'live': str(live), 'mode': '0640', 'label': 'systemd unit'}])
    assert not restarted['failed'], restarted['msg']
    assert restarted['activated'] == [str(live)] and live.read_text() == 'new\n'
    assert oct(os.stat(str(live)).st_mode & 0o777) == '0o640' and restarted['healthy'] is True


def test_a_candidate_that_is_gone_fails_the_restart_before_anything_starts(run_module, tiny, tmp_path):
    tiny.start(run_module)
    restarted = tiny.run(run_module, state='restarted', activate=[
        {'candidate': str(tmp_path / 'gone.next'), 'live': str(tmp_path / 'launch.conf'), 'label': 'launch configuration'}])
    assert restarted['failed'] and 'cannot put the launch configuration in place' in restarted['msg']
    assert 'the server was not started' in restarted['msg'] and set(restarted) >= KEYS
    assert restarted['activated'] == [] and restarted['running'] is False and tiny.running() == []


def test_a_restart_renews_the_guard_while_it_waits_and_hands_over_when_done(run_module, tiny, tmp_path):
    guard = armed_guard(tmp_path / 'guard')
    restarted = tiny.run(run_module, state='restarted', guard=dict(guard, after=30))
    assert not restarted['failed'], restarted['msg']
    lease = json.loads((tmp_path / 'guard' / 'lease.json').read_text())
    assert lease['run_id'] == 'run-1' and lease['by'] == 'sglang_server restarted (done)'
    # The router's admission comes next and cannot renew: its 30 s on top of the idle bound, by the clock alone.
    assert lease['holder'] is None and lease['expires_at'] == pytest.approx(lease['renewed_at'] + 30 + 90)


def test_a_stop_whose_guard_is_another_runs_fails_and_stops_nothing(run_module, tiny, tmp_path):
    started = tiny.start(run_module)
    guard = armed_guard(tmp_path / 'guard', run_id='run-0')
    stopped = tiny.run(run_module, state='stopped', guard=dict(guard, run_id='run-1'))
    assert stopped['failed'] and 'the rollback guard of run run-1 is not armed' in stopped['msg']
    assert set(stopped) >= KEYS and alive(started['pid']) and stopped['stopped_at'] is None
    assert not (tmp_path / 'guard' / 'lease.json').exists()


def test_check_mode_never_renews_the_guard(run_module, tiny, tmp_path):
    guard = armed_guard(tmp_path / 'guard')
    checked = tiny.run(run_module, check_mode=True, state='restarted', guard=guard)
    assert not checked['failed'] and not (tmp_path / 'guard' / 'lease.json').exists()


def test_a_restart_whose_controller_is_gone_stops_the_server_and_starts_nothing(run_module, tiny, tmp_path,
                                                                                 monkeypatch):
    started = tiny.start(run_module)
    monkeypatch.setattr(sglang_server, 'controller_gone', lambda: True)
    live, candidate = tmp_path / 'unit.conf', tmp_path / 'unit.conf.next'
    live.write_text('old\n')
    candidate.write_text('new\n')
    restarted = tiny.run(run_module, state='restarted', activate=[
        {'candidate': str(candidate), 'live': str(live), 'label': 'systemd unit'}])
    assert restarted['failed'] and set(restarted) >= KEYS
    assert restarted['msg'].startswith('the controller of this run is gone'), restarted['msg']
    assert 'the server tiny was not started (it is stopped)' in restarted['msg']
    assert 'restores the previous server once its idle bound passes' in restarted['msg']
    assert not alive(started['pid']) and tiny.running() == []
    assert restarted['running'] is False and restarted['started_at'] is None
    # Nothing moved either: the files stay as the guard armed them.
    assert restarted['activated'] == [] and live.read_text() == 'old\n'


def test_a_start_whose_controller_is_gone_starts_nothing(run_module, tiny, monkeypatch):
    monkeypatch.setattr(sglang_server, 'controller_gone', lambda: True)
    started = tiny.run(run_module, state='started')
    assert started['failed'] and 'the server tiny was not started;' in started['msg'], started['msg']
    assert tiny.running() == [] and started['pid'] is None


def test_a_start_whose_controller_is_gone_still_reports_a_server_that_runs(run_module, tiny, monkeypatch):
    # Nothing to start: waiting for the running server begins nothing the run must answer for.
    started = tiny.start(run_module)
    monkeypatch.setattr(sglang_server, 'controller_gone', lambda: True)
    again = tiny.run(run_module, state='started')
    assert not again['failed'] and again['healthy'] is True and again['pid'] == started['pid']


def test_a_stop_whose_controller_is_gone_renews_nothing_and_stops_nothing(run_module, tiny, tmp_path, monkeypatch):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _lease
    started = tiny.start(run_module)
    guard = armed_guard(tmp_path / 'guard')
    monkeypatch.setattr(_lease, 'controller_gone', lambda: True)
    stopped = tiny.run(run_module, state='stopped', guard=guard)
    assert stopped['failed'] and 'the controller of this run is gone' in stopped['msg'], stopped['msg']
    assert alive(started['pid']) and stopped['stopped_at'] is None
    assert not (tmp_path / 'guard' / 'lease.json').exists()
