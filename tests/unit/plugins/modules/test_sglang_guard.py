"""sglang_guard's main() in a temporary folder, around a real detached server (Python's http.server run from a
launch.json, as the role runs SGLang).

The guard's watcher is the detached process in its own session where the host runs no systemd (here), and
a transient systemd timer elsewhere; the command responder answers systemctl and systemd-run with success, so
no timer is ever made. Every test arms with a deadline far away and the fixture kills the watchers it
finds naming the test's folder, so none outlives its test or acts on its own.
"""
import json
import os
import pwd
import signal
import subprocess
import sys

import pytest

from helpers.http_responder import RouterImitation, closed_port_url, http_responder  # noqa: F401  (the fixture)
from helpers.http_responder import static_server_launch
from helpers.module_runner import ansiballz_package_data, run_module  # noqa: F401  (the fixtures)
from helpers.module_runner import kill_children_naming, processes_naming
from helpers.simulated import free_port, wait_for
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)
from ansible_collections.gpuops.sglang.plugins.modules import sglang_guard, sglang_server

KEYS = {'changed', 'armed', 'armed_by', 'deadline_at', 'lease', 'fired', 'last_fired', 'cmd'}
FIRED_KEYS = {'run_id', 'host', 'hostname', 'acted_by', 'status', 'healthy', 'reason', 'restored_files', 'steps',
              'problems', 'timings', 'started_at', 'finished_at', 'healthy_at', 'downtime_s', 'router_readmitted',
              'router_problem', 'bound', 'files', 'failed_files', 'killed'}
SYSTEMD = os.path.isdir('/run/systemd/system')
SYSTEMCTL = 'systemctl'


def systemd_only(argv):
    """What the guard may run here: systemctl and systemd-run (hosts with systemd), answered as success."""
    if os.path.basename(argv[0]) in ('systemctl', 'systemd-run'):
        return 0, '', ''
    raise AssertionError('sglang_guard ran %r' % argv)


class Deployment(object):
    """A launch.json, a 'site-packages' file and the server they describe, in tmp_path; the guard folder in a
    folder the guard trusts (tmp_path lies under /tmp, which it refuses)."""

    def __init__(self, tmp_path, trusted_dir):
        self.root = tmp_path
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.launch = tmp_path / 'launch.json'
        self.module_file = tmp_path / 'site-packages' / 'sglang' / 'worker.py'
        self.module_file.parent.mkdir(parents=True)
        self.module_file.write_bytes(b'# pre-run bytes \xe2\x9c\x93\n')
        self.created = tmp_path / 'created-by-run.txt'
        self.folder = trusted_dir / 'guard'
        self.pidfile = tmp_path / 'tiny.pid'
        self.write_launch(64)

    def write_launch(self, max_running, python=sys.executable):
        static_server_launch(self.launch, self.root / 'site', self.port,
                             {'/health': {}, '/server_info': {'max_running_requests': max_running}})
        if python != sys.executable:
            self.launch.write_text(self.launch.read_text().replace(json.dumps(sys.executable), json.dumps(python)))

    @property
    def server(self):
        return {'manager': 'detached', 'service_name': 'tiny', 'launch_file': str(self.launch),
                'pidfile': str(self.pidfile), 'log_file': str(self.root / 'tiny.log'), 'url': self.url,
                'term_timeout': 5}

    def files(self):
        return [str(self.launch), str(self.module_file), str(self.created)]

    def snapshot(self):
        """The files the guard keeps, byte for byte (None for one that does not exist)."""
        return dict((path, open(path, 'rb').read() if os.path.exists(path) else None) for path in self.files())

    def guard(self, run_module, state, check_mode=False, **extra):
        args = dict(state=state, folder=str(self.folder), server=self.server, host='tiny-host', health_timeout=20,
                    files=self.files(), stop_marker=str(self.root / 'stopped_at'))
        args.update(extra)
        result, calls = run_module(sglang_guard.main, args, systemd_only, check_mode=check_mode)
        return result

    def arm(self, run_module, run_id='run-1', **extra):
        armed = self.guard(run_module, 'armed', run_id=run_id, deadline=600, **extra)
        assert not armed['failed'], armed['msg']
        return armed

    def server_task(self, run_module, state):
        args = dict(state=state, manager='detached', service_name='tiny', launch_file=str(self.launch),
                    pidfile=str(self.pidfile), log_file=str(self.root / 'tiny.log'), url=self.url,
                    term_timeout=5, health_timeout=20, health_interval=0.05)
        result, calls = run_module(sglang_server.main, args, systemd_only)
        assert not result['failed'], result['msg']
        return result

    def pid(self):
        return int(self.pidfile.read_text()) if self.pidfile.exists() else None

    def watchers(self):
        return processes_naming(str(self.folder))

    def kill_everything_started(self):
        # A watcher whose guard is gone leaves by itself (and one seen a moment after its exec, before
        # /proc shows its command line, would be missed below). Then every process whose command line
        # names this test's folder or port: watchers, the servers the module and the guard started, leftovers.
        state = self.folder / 'state.json'
        if state.exists():
            state.unlink()
        kill_children_naming(str(self.root))
        kill_children_naming(str(self.folder))


@pytest.fixture
def deployment(tmp_path, trusted_dir, ansiballz_package_data):
    made = Deployment(tmp_path, trusted_dir)
    yield made
    made.kill_everything_started()


@pytest.fixture
def running(deployment, run_module):
    """The deployment with its server running (the previous server a guard restores)."""
    started = deployment.server_task(run_module, 'started')
    assert started['healthy']
    return deployment


def assert_watcher_started(deployment, armed):
    if SYSTEMD:
        runs = [argv for argv in armed['cmd'] if os.path.basename(argv[0]) == 'systemd-run']
        # A service that polls the lease and the deadline, not a timer at the deadline.
        assert runs and 'watch' in runs[0] and not any(arg.startswith('--on-active') for arg in runs[0]), armed['cmd']
    else:
        # Popen returns once the watcher's exec began, a moment before /proc shows its new command line.
        wait_for(deployment.watchers, 10, 'the detached watcher naming %s' % deployment.folder)


def test_query_without_a_folder_reports_no_guard_and_creates_nothing(run_module, deployment):
    result = deployment.guard(run_module, 'query')
    assert not result['failed'] and set(result) >= KEYS
    assert result == dict(result, changed=False, armed=False, armed_by=None, deadline_at=None, fired=None,
                          last_fired=None)
    assert not deployment.folder.exists()


def test_arming_keeps_the_files_and_starts_a_watcher(run_module, deployment):
    armed = deployment.arm(run_module, 'run-1')
    assert set(armed) >= KEYS and armed['changed'] is True
    assert armed['armed'] is True and armed['armed_by'] == 'run-1' and armed['fired'] is None
    assert armed['deadline_at'] > 0
    assert_watcher_started(deployment, armed)
    query = deployment.guard(run_module, 'query')
    assert not query['failed'] and query['changed'] is False
    assert (query['armed'], query['armed_by']) == (True, 'run-1')
    # On the wall clock as it reads at each query (carried over from the boot clock): the same but for its drift.
    assert query['deadline_at'] == pytest.approx(armed['deadline_at'], abs=1)
    assert query['lease']['deadline_at_boot'] == armed['lease']['deadline_at_boot']


def test_arming_in_check_mode_says_it_would_and_keeps_nothing(run_module, deployment):
    before = deployment.snapshot()
    checked = deployment.guard(run_module, 'armed', check_mode=True, run_id='run-1', deadline=600)
    assert not checked['failed'] and checked['changed'] is True and checked['armed'] is False
    assert deployment.watchers() == [] and deployment.snapshot() == before
    assert not (deployment.folder / 'state.json').exists()


def test_a_second_arm_while_armed_is_refused_and_keeps_the_first_runs_backups(run_module, deployment):
    deployment.arm(run_module, 'a')
    deployment.module_file.write_bytes(b'# changed by run a\n')
    refused = deployment.guard(run_module, 'armed', run_id='b', deadline=600)
    assert refused['failed'] and set(refused) >= KEYS
    assert refused['msg'] == ('a guard armed by run a is still pending on this host; restore it first '
                              '(state=restored)')
    assert refused['armed_by'] == 'a' and refused['changed'] is False
    # The backups are still run a's: a restore puts back the bytes from before run a.
    restored = deployment.guard(run_module, 'restored')
    assert not restored['failed'], restored['msg']
    assert deployment.module_file.read_bytes() == b'# pre-run bytes \xe2\x9c\x93\n'


def test_an_arm_with_bad_input_is_refused_before_anything_is_kept(run_module, deployment):
    args = dict(state='armed', folder=str(deployment.folder), run_id='r', files=deployment.files(),
                server=deployment.server, deadline=0)
    result, calls = run_module(sglang_guard.main, args, systemd_only)
    assert result['failed'] and result['msg'] == 'deadline must be above 0 seconds' and set(result) >= KEYS
    assert calls == [] and not deployment.folder.exists() and deployment.watchers() == []


@pytest.mark.parametrize('bounds, message', [
    ({'deadline': 1e12}, 'deadline (1e+12 s) must be above 0 and at most 172800 s'),
    ({'deadline': float('nan')}, 'deadline (nan s) must be above 0 and at most 172800 s'),
    ({'deadline': 600, 'idle': 1e12}, 'idle (1e+12 s) must be from 0 to 3600 s'),
    ({'deadline': 600, 'idle': 90, 'after': 1e12}, 'after (1e+12 s) must be from 0 to 172800 s'),
], ids=['deadline-1e12', 'deadline-nan', 'idle-1e12', 'after-1e12'])
def test_an_arm_past_the_longest_a_guard_may_hold_a_host_is_refused_before_anything_is_kept(run_module, deployment,
                                                                                            bounds, message):
    # A guard armed with a deadline of 1e12 leaves a host whose controller is gone down for 30,000 years; with NaN,
    # it never passes. The host refuses it whoever asks (the role's plan refuses it first).
    args = dict(state='armed', folder=str(deployment.folder), run_id='r', files=deployment.files(),
                server=deployment.server, **bounds)
    result, calls = run_module(sglang_guard.main, args, systemd_only)
    assert result['failed'] and result['msg'].startswith(message) and set(result) >= KEYS, result['msg']
    assert result['msg'].endswith('; nothing was armed') and result['changed'] is False
    assert calls == [] and not deployment.folder.exists() and deployment.watchers() == []


def test_the_guard_itself_refuses_an_arm_past_the_maximum_whoever_calls_it(deployment):
    # The domain's own check, under the module's: nothing is made, not even the folder.
    guard = sglang_guard.Guard(str(deployment.folder))
    with pytest.raises(sglang_guard.GuardError, match=r'^deadline \(1e\+12 s\) must be above 0 and at most 172800 s'):
        guard.arm('r', 1e12, deployment.files(), deployment.server, 'tiny-host', sys.executable, {}, systemd=False)
    assert not deployment.folder.exists() and deployment.watchers() == []


def test_an_arm_with_half_a_server_is_refused_by_the_argument_spec(run_module, deployment):
    """The server's options are sglang_server's own spec: each missing one is named, nothing is kept."""
    result, calls = run_module(sglang_guard.main, dict(state='armed', folder=str(deployment.folder), run_id='r',
                                                       server={'manager': 'detached'}), systemd_only)
    assert result['failed'] and 'server' in result['msg']
    assert all(name in result['msg'] for name in ('launch_file', 'pidfile', 'log_file', 'url'))
    assert calls == [] and not deployment.folder.exists() and deployment.watchers() == []


def test_a_server_under_the_dropped_base_url_alias_is_refused_and_nothing_is_armed(run_module, deployment):
    old = dict(deployment.server)
    old['base_url'] = old.pop('url')
    result, calls = run_module(sglang_guard.main, dict(state='armed', folder=str(deployment.folder), run_id='r',
                                                       files=deployment.files(), server=old), systemd_only)
    assert result['failed'] and 'missing required arguments: url' in result['msg']
    assert calls == [] and not deployment.folder.exists() and deployment.watchers() == []


def test_an_arm_without_run_id_is_refused_by_the_argument_spec(run_module, deployment):
    result, _ = run_module(sglang_guard.main, dict(state='armed', folder=str(deployment.folder),
                                                   server=deployment.server), systemd_only)
    assert result['failed'] and 'run_id' in result['msg'] and not deployment.folder.exists()


def test_confirming_drops_the_guard_and_the_watcher_leaves(run_module, deployment):
    armed = deployment.arm(run_module, 'run-2')
    assert_watcher_started(deployment, armed)
    deployment.module_file.write_bytes(b'# the new, verified bytes\n')
    checked = deployment.guard(run_module, 'confirmed', check_mode=True, run_id='run-2')
    assert not checked['failed'] and checked['changed'] is True and checked['armed'] is True
    confirmed = deployment.guard(run_module, 'confirmed', run_id='run-2')
    assert not confirmed['failed'], confirmed['msg']
    assert confirmed['changed'] is True and confirmed['armed'] is False and confirmed['fired'] is None
    assert set(confirmed) >= KEYS
    assert deployment.module_file.read_bytes() == b'# the new, verified bytes\n'
    assert not (deployment.folder / 'fired.json').exists()
    if SYSTEMD:
        # The watcher service sees its guard gone and leaves by itself: nothing is stopped.
        assert not any(argv[:2] == [SYSTEMCTL, 'stop'] for argv in confirmed['cmd'])
    else:
        # It sees its guard gone at its next look (every half second) and exits: it never acts.
        wait_for(lambda: not deployment.watchers(), 10, 'the watcher leaving')
    # Confirmed, there is nothing left to restore.
    restore = deployment.guard(run_module, 'restored')
    assert not restore['failed'] and restore['changed'] is False and restore['fired'] is None
    assert deployment.module_file.read_bytes() == b'# the new, verified bytes\n'


def test_confirming_with_another_run_id_fails_and_leaves_the_guard_armed(run_module, deployment):
    deployment.arm(run_module, 'run-3')
    checked = deployment.guard(run_module, 'confirmed', check_mode=True, run_id='someone-else')
    assert not checked['failed'] and checked['changed'] is False
    wrong = deployment.guard(run_module, 'confirmed', run_id='someone-else')
    assert wrong['failed'] and set(wrong) >= KEYS
    assert wrong['msg'] == 'no guard of run someone-else is armed (armed: run-3)'
    assert wrong['armed'] is True and wrong['armed_by'] == 'run-3' and wrong['changed'] is False


def test_a_restore_puts_back_every_file_byte_for_byte_and_the_previous_server(run_module, running):
    # A mode the umask would not give a new file: the restore must set it, not inherit it.
    os.chmod(str(running.launch), 0o666)
    before = running.snapshot()
    first_pid = running.pid()
    running.arm(run_module, 'run-4')
    # What a run does in its window: a new launch configuration (that cannot start), a half-patched
    # file, a file that was not there before, the new server running.
    running.write_launch(96, python='/nonexistent/python')
    os.chmod(str(running.launch), 0o640)
    running.module_file.write_bytes(b'# half-patched\n')
    running.created.write_text('new')
    checked = running.guard(run_module, 'restored', check_mode=True)
    assert checked['changed'] is True and checked['armed'] is True and checked['fired'] is None
    assert running.module_file.read_bytes() == b'# half-patched\n'

    restored = running.guard(run_module, 'restored', reason='the new server did not become healthy')
    assert not restored['failed'], restored['msg']
    assert set(restored) >= KEYS and restored['changed'] is True and restored['armed'] is False
    fired = restored['fired']
    assert set(fired) >= FIRED_KEYS
    assert (fired['acted_by'], fired['status'], fired['healthy'], fired['problems']) == \
        ('takeover', 'rolled_back', True, [])
    assert (fired['run_id'], fired['host'], fired['reason']) == ('run-4', 'tiny-host',
                                                                 'the new server did not become healthy')
    assert sorted(fired['restored_files']) == sorted(running.files())
    assert running.snapshot() == before
    assert os.stat(str(running.launch)).st_mode & 0o7777 == 0o666
    # The previous server runs again, started by the guard from the restored launch configuration.
    assert running.pid() not in (None, first_pid)
    query = running.guard(run_module, 'query')
    assert query['last_fired'] == fired and query['armed'] is False

    again = running.guard(run_module, 'restored')
    assert not again['failed'] and again['changed'] is False and again['fired'] is None
    assert again['last_fired']['acted_by'] == 'takeover'


def test_a_restore_by_the_arming_run_is_the_controllers_and_a_late_confirm_says_so(run_module, deployment):
    deployment.arm(run_module, 'run-5')
    restored = deployment.guard(run_module, 'restored', run_id='run-5', reason='the verification failed')
    assert not restored['failed'], restored['msg']
    assert restored['fired']['acted_by'] == 'controller'
    late = deployment.guard(run_module, 'confirmed', run_id='run-5')
    assert late['failed'] and set(late) >= KEYS
    assert late['msg'] == ('the guard acted before the run confirmed the new server (controller): the '
                           'verification failed; the host now serves the previous server')
    assert late['fired']['status'] == 'rolled_back' and late['armed'] is False


def test_a_restore_naming_another_run_leaves_that_runs_guard_alone(run_module, deployment):
    deployment.arm(run_module, 'run-6')
    deployment.module_file.write_bytes(b'# run-6 bytes\n')
    result = deployment.guard(run_module, 'restored', run_id='run-other')
    assert not result['failed'] and result['fired'] is None
    assert result['armed'] is True and result['armed_by'] == 'run-6'
    assert deployment.module_file.read_bytes() == b'# run-6 bytes\n'


@pytest.mark.parametrize('check_mode', [True, False])
def test_a_restore_naming_another_run_is_not_a_change(run_module, deployment, check_mode):
    deployment.arm(run_module, 'run-6')
    result = deployment.guard(run_module, 'restored', check_mode=check_mode, run_id='run-other')
    assert not result['failed'] and result['changed'] is False


def test_a_restore_stops_what_is_left_of_sglang_matching_the_kill_patterns(run_module, deployment):
    marker = 'leftover-scheduler-of-%d' % deployment.port
    leftover = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', marker],
                                start_new_session=True)
    bystander = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)',
                                  'bystander-%d' % deployment.port], start_new_session=True)
    try:
        deployment.arm(run_module, 'run-7', kill_patterns=[marker])
        restored = deployment.guard(run_module, 'restored')
        assert not restored['failed'], restored['msg']
        assert 'stop what is left of SGLang' in restored['fired']['steps']
        assert leftover.wait(timeout=10) == -signal.SIGTERM
        assert bystander.poll() is None, 'a process the patterns do not match was signalled'
    finally:
        for proc in (leftover, bystander):
            proc.kill()
            proc.wait()


def test_a_rollback_whose_previous_server_cannot_start_fails_saying_why(run_module, deployment):
    # The previous launch configuration names an interpreter that does not exist.
    deployment.write_launch(64, python=str(deployment.root / 'no-python'))
    deployment.arm(run_module, 'run-8')
    deployment.module_file.write_bytes(b'# changed\n')
    restored = deployment.guard(run_module, 'restored')
    assert restored['failed'] and set(restored) >= KEYS
    assert restored['msg'].startswith('the rollback did not bring the previous server back: start the previous '
                                      'server: could not run %s' % (deployment.root / 'no-python'))
    fired = restored['fired']
    assert fired['status'] == 'failed' and fired['healthy'] is False and set(fired) >= FIRED_KEYS
    # The files are back all the same, and the guard is done: the next run starts from a clean slate.
    assert deployment.module_file.read_bytes() == b'# pre-run bytes \xe2\x9c\x93\n'
    assert restored['armed'] is False and restored['last_fired'] == fired


def test_a_rollback_without_a_previous_launch_configuration_starts_nothing(run_module, deployment):
    deployment.launch.unlink()
    deployment.arm(run_module, 'run-9')
    deployment.write_launch(96)
    restored = deployment.guard(run_module, 'restored')
    assert restored['failed']
    assert 'there was no previous server to start (no launch configuration before the run)' in restored['msg']
    # The launch configuration did not exist before the run: the restore removes it.
    assert not deployment.launch.exists() and str(deployment.launch) in restored['fired']['restored_files']


def test_a_state_file_that_is_not_json_is_a_clear_failure_and_is_left_for_inspection(run_module, deployment):
    deployment.folder.mkdir()
    (deployment.folder / 'state.json').write_text('{half')
    for state, extra in (('query', {}), ('restored', {}), ('confirmed', {'run_id': 'r'})):
        result = deployment.guard(run_module, state, **extra)
        assert result['failed'] and set(result) >= KEYS, state
        assert 'state.json is not valid JSON; inspect it before running again' in result['msg']
    assert (deployment.folder / 'state.json').read_text() == '{half'


def test_a_restore_takes_the_server_out_of_its_router_and_puts_the_previous_one_back(run_module, running,
                                                                                     http_responder):
    router = RouterImitation(http_responder, [running.url], api_key='router-key')
    running.arm(run_module, 'run-10', router={'url': http_responder.url, 'worker_url': running.url,
                                              'api_key': 'router-key', 'timeout': 10})
    restored = running.guard(run_module, 'restored', run_id='run-10', reason='the confirm failed')
    assert not restored['failed'], restored['msg']
    fired = restored['fired']
    assert (fired['router_readmitted'], fired['router_problem'], fired['problems']) == (True, None, [])
    # No request may reach a server about to stop: out of the router first, back in only once healthy.
    assert fired['steps'][:2] == ['take the server out of the router', 'stop the server that runs now']
    assert fired['steps'][-1] == 'put the server back into the router'
    changes = [call for call in router.calls() if not call.startswith('GET')]
    assert changes == ['DELETE /workers/w-0', 'POST /workers'] and router.urls() == [running.url]
    assert {request.headers.get('Authorization') for request in http_responder.requests} == {'Bearer router-key'}
    assert 'router-key' not in repr(restored)


def test_a_restore_whose_router_is_gone_still_restores_and_says_why_it_is_not_back(run_module, deployment):
    router_url = closed_port_url()
    deployment.arm(run_module, 'run-11', router={'url': router_url, 'worker_url': deployment.url, 'timeout': 1})
    deployment.module_file.write_bytes(b'# changed\n')
    restored = deployment.guard(run_module, 'restored', run_id='run-11')
    # The previous server answers /health again: the rollback succeeded, the router is the operator's to fix.
    assert not restored['failed'], restored['msg']
    fired = restored['fired']
    assert fired['status'] == 'rolled_back' and fired['router_readmitted'] is False
    assert fired['router_problem'].startswith('GET %s/workers answered nothing' % router_url)
    assert deployment.module_file.read_bytes() == b'# pre-run bytes \xe2\x9c\x93\n'


def test_an_arm_with_an_idle_bound_reports_its_lease_and_the_arm_as_the_first_renewal(run_module, deployment):
    armed = deployment.arm(run_module, 'run-20', idle=90, after=30)
    lease = armed['lease']
    assert lease['idle'] == 90 and lease['renewed_by'] == 'arm the guard'
    # The step after the arm (out of the router) cannot renew: its 30 s come on top of the idle bound, counted on
    # the boot clock; the wall-clock times show the same, but for the wall clock's drift since the arm.
    assert lease['expires_at_boot'] == lease['renewed_at_boot'] + 30 + 90
    assert lease['acts_at_boot'] == lease['expires_at_boot'] and lease['armed_at_boot'] == lease['renewed_at_boot']
    assert lease['expires_at'] == pytest.approx(lease['renewed_at'] + 30 + 90, abs=1)
    assert lease['deadline_at'] == armed['deadline_at'] and lease['acts_at'] == lease['expires_at']
    assert lease['armed_at'] <= lease['renewed_at'] and 0 < lease['acts_in'] <= 30 + 90
    assert lease['boot_id'] == open('/proc/sys/kernel/random/boot_id').read().strip()
    query = deployment.guard(run_module, 'query', check_mode=True)
    assert query['changed'] is False
    boot_clock = ('boot_id', 'armed_at', 'renewed_at', 'renewed_by', 'idle', 'armed_at_boot', 'renewed_at_boot',
                  'expires_at_boot', 'deadline_at_boot', 'acts_at_boot')
    assert {key: query['lease'][key] for key in boot_clock} == {key: lease[key] for key in boot_clock}


def test_an_arm_without_an_idle_bound_acts_only_at_its_deadline(run_module, deployment):
    armed = deployment.arm(run_module, 'run-21')
    assert armed['lease']['idle'] is None and armed['lease']['expires_at'] is None
    assert armed['lease']['acts_at'] == armed['deadline_at'] and armed['lease']['expires_at_boot'] is None
    assert not (deployment.folder / 'lease.json').exists()


def test_a_negative_idle_bound_is_refused(run_module, deployment):
    refused = deployment.guard(run_module, 'armed', run_id='run-22', idle=-1)
    assert refused['failed'] and 'idle must not be negative' in refused['msg'] and not refused['armed']


def test_a_rollback_on_demand_says_so_in_its_report(run_module, deployment):
    deployment.arm(run_module, 'run-23', idle=90)
    restored = deployment.guard(run_module, 'restored', trigger='on_demand', reason='rollback on demand')
    assert not restored['failed'], restored['msg']
    assert restored['fired']['acted_by'] == 'on_demand' and restored['fired']['bound'] == 'on_demand'
    assert restored['lease'] is None and not (deployment.folder / 'lease.json').exists()
    # A host without an armed guard: nothing to do, nothing changed.
    again = deployment.guard(run_module, 'restored', trigger='on_demand', reason='rollback on demand')
    assert not again['failed'] and again['changed'] is False and again['fired'] is None
    assert again['last_fired']['bound'] == 'on_demand'


def test_the_guard_records_the_server_users_uid_for_its_leftovers(run_module, deployment):
    # A restore stops leftovers of the server's user only: a server that runs as nobody has its leftovers as nobody.
    deployment.arm(run_module, 'run-1', server=dict(deployment.server, user='nobody'))
    state = json.loads((deployment.folder / 'state.json').read_text())
    assert state['server_uid'] == pwd.getpwnam('nobody').pw_uid and state['server']['user'] == 'nobody'


def test_a_server_user_that_does_not_exist_is_refused_and_nothing_is_armed(run_module, deployment):
    refused = deployment.guard(run_module, 'armed', run_id='run-1', deadline=600,
                               server=dict(deployment.server, user='gpuops-no-such-user'))
    assert refused['failed'] and 'the user gpuops-no-such-user does not exist on this host' in refused['msg']
    assert not (deployment.folder / 'state.json').exists() and deployment.watchers() == []
