"""sglang_server and sglang_guard on a real detached server process and real files, each module run as Ansible runs it on
the target (helpers.ansible_run.run_task), the rollback and guard_status playbooks through ansible-playbook.

The "server" is tests/integration/files/tiny_server.py (a small stand-in: /health, /server_info), run
detached from a launch.json exactly as the role runs SGLang. No systemd here: the guard's watcher is
the detached process in its own session, the path of hosts without systemd.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request

import pytest

from helpers.ansible_run import run_task, run_tasks
from helpers.http_responder import HttpResponder, Reply, RouterImitation
from helpers.port_owner import Squatter
from helpers.router import Router
from helpers.simulated import detached_server_args, free_port, wait_for
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

TINY_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'files', 'tiny_server.py')


def health(port):
    try:
        with urllib.request.urlopen('http://127.0.0.1:%d/health' % port, timeout=2) as response:
            return response.status
    except OSError:
        return None


def max_running_requests(port):
    with urllib.request.urlopen('http://127.0.0.1:%d/server_info' % port, timeout=2) as response:
        return json.load(response)['max_running_requests']


def sha256(path):
    with open(str(path), 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()




def watchers(guard_dir):
    """PIDs of guard watchers for this folder (their command line names it)."""
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/%s/cmdline' % entry, 'rb') as handle:
                    if str(guard_dir).encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def watching(guard_dir):
    """True once a watcher of this folder sleeps between its polls: its code is imported and it reads the state
    (the kernel's wait channel of a process in time.sleep is hrtimer_nanosleep)."""
    for pid in watchers(guard_dir):
        try:
            with open('/proc/%d/wchan' % pid) as handle:
                if 'nanosleep' in handle.read():
                    return True
        except OSError:
            continue
    return False


class Deployment(object):
    """A launch.json, a 'site-packages' file and the server they describe, in a private folder."""

    def __init__(self, tmp_path, trusted_dir):
        self.root = tmp_path
        self.port = free_port()
        self.launch = tmp_path / 'launch.json'
        self.module_file = tmp_path / 'site-packages' / 'sglang' / 'worker.py'
        self.module_file.parent.mkdir(parents=True)
        self.module_file.write_bytes(b'# pre-run bytes \xe2\x9c\x93\n')
        # tmp_path lies under /tmp (world-writable): the guard refuses it (test_an_untrusted_... below).
        self.guard_dir = trusted_dir / 'guard'
        self.write_launch(64)

    def write_launch(self, max_running, extra=()):
        # Run as `python -m tiny_server ...`, the way the role runs `python -m sglang.launch_server`.
        self.launch.write_text(json.dumps({
            'python': sys.executable, 'module': 'tiny_server',
            'args': ['--port', self.port, '--max-running-requests', max_running] + list(extra),
            'environment': {'PYTHONPATH': os.path.dirname(TINY_SERVER)}}))

    @property
    def server(self):
        return {'manager': 'detached', 'service_name': 'tiny', 'launch_file': str(self.launch),
                'pidfile': str(self.root / 'tiny.pid'), 'log_file': str(self.root / 'tiny.log'),
                'url': 'http://127.0.0.1:%d' % self.port, 'term_timeout': 5}

    def server_args(self, **extra):
        return detached_server_args(self.root, 'tiny', self.launch, self.server['url'],
                                    **dict(dict(term_timeout=5), **extra))

    def guard_args(self, **extra):
        args = dict(folder=str(self.guard_dir), server=self.server, host='tiny-host', health_timeout=20,
                    files=[str(self.launch), str(self.module_file), str(self.root / 'created-by-run.txt')],
                    stop_marker=str(self.root / 'stopped_at'))
        args.update(extra)
        return args


@pytest.fixture
def deployment(tmp_path, trusted_dir):
    deployed = Deployment(tmp_path, trusted_dir)
    yield deployed
    # Leave nothing running, whatever the test did.
    run_task(tmp_path, 'gpuops.sglang.sglang_server', deployed.server_args(state='stopped'), name='cleanup')
    state = deployed.guard_dir / 'state.json'
    if state.exists():
        state.unlink()


@pytest.mark.slow
def test_server_module_starts_waits_for_health_on_the_host_and_verifies(deployment, tmp_path):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       deployment.server_args(state='started', expected_server_info={'max_running_requests': 64}),
                       name='start')
    assert not started.failed, started.get('msg')
    assert started['changed'] and started['healthy'] and started['healthy_at'] >= started['started_at']
    assert health(deployment.port) == 200
    again = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                     deployment.server_args(state='started', expected_server_info={'max_running_requests': 64}),
                     name='again')
    assert not again['changed'] and again['pid'] == started['pid']
    mismatch = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                        deployment.server_args(state='started', expected_server_info={'max_running_requests': 96}),
                        check=True, name='check')
    assert mismatch['mismatches'] == ['max_running_requests is 64, want 96'] and mismatch['changed']
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(state='stopped'), name='stop')
    assert stopped['changed'] and stopped['stopped_at'] and health(deployment.port) is None


@pytest.mark.slow
def test_server_that_exits_at_once_fails_without_waiting_for_the_health_timeout(deployment, tmp_path):
    deployment.write_launch(64, extra=['--no-such-flag'])
    result = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(state='started',
                                                                                      health_timeout=600),
                      name='badflag')
    assert result.failed
    assert 'the server exited with status 2' in result['msg']
    assert set(['running', 'pid', 'healthy', 'stopped_at', 'mismatches', 'cmd']) <= set(result)


@pytest.mark.slow
def test_a_poll_interval_of_zero_is_refused(deployment, tmp_path):
    result = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(health_interval=0), name='zero')
    assert result.failed and 'health_interval must be above 0' in result['msg']


@pytest.mark.slow
def test_guard_restores_files_and_previous_server_at_its_deadline(deployment, tmp_path):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start')
    assert not started.failed, started.get('msg')
    before = {'launch': sha256(deployment.launch), 'module': sha256(deployment.module_file)}
    # 10 s leaves the changes below (made within milliseconds of the arm returning) well inside the deadline.
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-1', deadline=10), name='arm')
    assert not armed.failed, armed.get('msg')
    assert armed['armed'] and armed['armed_by'] == 'run-1'
    # The run changes files (a launch configuration that cannot start), then its controller vanishes.
    deployment.write_launch(96, extra=['--no-such-flag'])
    deployment.module_file.write_bytes(b'# half-patched\n')
    (tmp_path / 'created-by-run.txt').write_text('new')
    wait_for(lambda: (deployment.guard_dir / 'fired.json').exists() and not
               (deployment.guard_dir / 'state.json').exists(), 10 + 30, 'the guard acting and finishing')
    assert health(deployment.port) == 200 and max_running_requests(deployment.port) == 64
    assert int((tmp_path / 'tiny.pid').read_text()) != started['pid'], 'the guard started the server again'
    assert {'launch': sha256(deployment.launch), 'module': sha256(deployment.module_file)} == before
    assert not (tmp_path / 'created-by-run.txt').exists()
    report = json.loads((deployment.guard_dir / 'fired.json').read_text())
    assert report['acted_by'] == 'deadline' and report['status'] == 'rolled_back' and report['healthy']
    assert report['run_id'] == 'run-1' and report['host'] == 'tiny-host'
    # The run that comes back too late learns that it was rolled back, and says so.
    late = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                    deployment.guard_args(state='confirmed', run_id='run-1'), name='late')
    assert late.failed and 'the guard acted before the run confirmed' in late['msg']
    assert late['fired']['status'] == 'rolled_back'


@pytest.mark.slow
def test_confirmed_guard_never_acts(deployment, tmp_path):
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    run_task(tmp_path, 'gpuops.sglang.sglang_guard',
             deployment.guard_args(state='armed', run_id='run-2', deadline=600), name='arm')
    assert watchers(deployment.guard_dir), 'no watcher was started'
    deployment.module_file.write_bytes(b'# the new, verified bytes\n')
    confirmed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                         deployment.guard_args(state='confirmed', run_id='run-2'), name='confirm')
    assert not confirmed.failed, confirmed.get('msg')
    assert confirmed['changed'] and not confirmed['armed']
    # A watcher leaves only by acting or by seeing its guard confirmed; with 600 s to go, it must be the latter.
    wait_for(lambda: not watchers(deployment.guard_dir), 10, 'the watcher exiting')
    assert deployment.module_file.read_bytes() == b'# the new, verified bytes\n'
    assert not (deployment.guard_dir / 'fired.json').exists()


@pytest.mark.slow
def test_restore_now_takes_over_and_a_second_arm_is_refused_while_armed(deployment, tmp_path):
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    original = deployment.module_file.read_bytes()
    run_task(tmp_path, 'gpuops.sglang.sglang_guard', deployment.guard_args(state='armed', run_id='a', deadline=600),
             name='arm-a')
    refused = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                       deployment.guard_args(state='armed', run_id='b', deadline=600), name='arm-b')
    assert refused.failed and 'still pending' in refused['msg'] and refused['armed_by'] == 'a'
    deployment.module_file.write_bytes(b'# changed\n')
    check = run_task(tmp_path, 'gpuops.sglang.sglang_guard', deployment.guard_args(state='restored'),
                     check=True, name='check')
    assert check['changed'] and check['armed'] and deployment.module_file.read_bytes() == b'# changed\n'
    taken = run_task(tmp_path, 'gpuops.sglang.sglang_guard', deployment.guard_args(state='restored',
                                                                                 reason='taken over'), name='take')
    assert not taken.failed, taken.get('msg')
    assert taken['fired']['acted_by'] == 'takeover' and taken['fired']['status'] == 'rolled_back'
    assert deployment.module_file.read_bytes() == original and health(deployment.port) == 200
    again = run_task(tmp_path, 'gpuops.sglang.sglang_guard', deployment.guard_args(state='restored'), name='again')
    assert not again['changed'] and again['fired'] is None and again['last_fired']['acted_by'] == 'takeover'



@pytest.mark.slow
def test_a_restore_puts_the_previous_server_back_into_its_router(deployment, tmp_path):
    router = Router(tmp_path)
    try:
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
        worker = deployment.server['url']
        membership = dict(router_url=router.url, worker_url=worker, timeout=20)
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', membership, name='in').failed
        armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                         deployment.guard_args(state='armed', run_id='run-r', deadline=600,
                                               router={'url': router.url, 'worker_url': worker, 'timeout': 20}),
                         name='arm')
        assert not armed.failed, armed.get('msg')
        # The run put its new server back into the router, then could not confirm it: the guard must take
        # the server out before it stops it, and put the restored one back.
        restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='restored', run_id='run-r', reason='the confirm failed'),
                            name='restore')
        assert not restored.failed, restored.get('msg')
        fired = restored['fired']
        assert fired['healthy'] is True and fired['router_readmitted'] is True and fired['problems'] == []
        assert fired['steps'][:2] == ['take the server out of the router', 'stop the server that runs now']
        assert fired['steps'][-1] == 'put the server back into the router'
        assert router.urls() == [worker]
    finally:
        router.stop()


@pytest.mark.slow
def test_a_readmission_a_restore_could_not_make_is_owed_to_the_next_run_until_one_makes_it(deployment, tmp_path):
    # Issue 47 (make matrix): a restore whose router would not take the previous server back left it out, and every
    # later run found it unlisted, took it for a server an operator had drained and left it out for good. The guard
    # now records the readmission it owes; the next run's gather reads it, its decision redeploys the server to
    # put it back, and the run's confirm (after its readmission) clears it.
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    worker = deployment.server['url']
    owed_file = deployment.guard_dir / 'router_owed.json'
    info_args = dict(deployment.server_args(), guard_folder=str(deployment.guard_dir))
    for key in ('state', 'term_timeout', 'health_timeout', 'log_file'):
        info_args.pop(key, None)
    with HttpResponder() as responder:
        router = RouterImitation(responder, [worker])
        refusing = {'adds': True}

        def add(request, match):
            return Reply(503, json={'error': 'overloaded'}) if refusing['adds'] else router.add(request, match)
        responder.route('POST', '/workers', handler=add)
        settings = {'url': responder.url, 'worker_url': worker, 'timeout': 2}
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='armed', run_id='run-1', deadline=600, router=settings),
                            name='arm-1').failed
        restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='restored', run_id='run-1', reason='the start failed'),
                            name='restore-1')
        fired = restored['fired']
        assert fired['healthy'] is True and fired['router_readmitted'] is False and router.urls() == []

        gathered = run_task(tmp_path, 'gpuops.sglang.sglang_server_info', info_args, name='gather')
        owed = gathered['guard_router_owed']
        assert owed['run_id'] == 'run-1' and owed['router_url'] == responder.url and owed['worker_url'] == worker
        assert owed['why'] == fired['router_problem'] and oct(owed_file.stat().st_mode & 0o777) == '0o600'
        decision = dict(adaptive=False, files=[], state=dict(gathered), python=sys.executable, host='tiny-host')
        decided = run_task(tmp_path, 'gpuops.sglang.sglang_decision', dict(decision, router_url=responder.url + '/'),
                           name='decide')
        assert decided['redeploy_needed'] is True and decided['readmission_owed']['run_id'] == 'run-1'
        assert decided['reasons'] == ['left out of the router by the restore of run run-1']
        # Owed to that router only: behind another one (or none) the server is one an operator left out.
        elsewhere = run_task(tmp_path, 'gpuops.sglang.sglang_decision',
                             dict(decision, router_url='http://127.0.0.1:9'), name='elsewhere')
        assert elsewhere['readmission_owed'] is None and elsewhere['reasons'] == []

        # The next run: armed with the router (the role counts the owed server as listed), back in, confirmed.
        refusing['adds'] = False
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='armed', run_id='run-2', deadline=600, router=settings),
                            name='arm-2').failed
        assert owed_file.exists()
        back = run_task(tmp_path, 'gpuops.sglang.sglang_router_worker',
                        dict(router_url=responder.url, worker_url=worker, timeout=10), name='in')
        assert not back.failed and back['member'] is True and router.urls() == [worker]
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='confirmed', run_id='run-2'), name='confirm-2').failed
    assert not owed_file.exists()
    assert run_task(tmp_path, 'gpuops.sglang.sglang_server_info', info_args, name='again')['guard_router_owed'] is None


@pytest.mark.slow
def test_a_restore_never_takes_a_squatter_for_the_previous_server_nor_hands_the_router_its_key(deployment, tmp_path):
    # Issue 41: while the previous server loads its model, another user's process binds its port and answers as
    # it would. The restore reported it healthy and put it back into the router with the worker's key, which the
    # router would then send to the squatter with every request.
    loading = tmp_path / 'model-loading'
    keys = tmp_path / 'server.yaml'
    keys.write_text('api-key: "worker-key"\n')
    keys.chmod(0o600)
    deployment.write_launch(64, ['--load-hold-file', str(loading), '--config', str(keys)])
    worker = deployment.server['url']
    with HttpResponder() as responder:
        router = RouterImitation(responder, [worker])
        armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                         deployment.guard_args(state='armed', run_id='run-q', deadline=600, health_timeout=3,
                                               router={'url': responder.url, 'worker_url': worker, 'timeout': 10}),
                         name='arm')
        assert not armed.failed, armed.get('msg')
        loading.write_text('')
        with Squatter(deployment.port, {'max_running_requests': 64}) as squatter:
            restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                                deployment.guard_args(state='restored', run_id='run-q', reason='the confirm failed'),
                                name='restore')
    fired = restored['fired']
    assert fired['healthy'] is False and fired['router_readmitted'] is False
    assert fired['router_problem'] == 'the restored server is not healthy, so it was not put back'
    assert any('the previous server is not healthy: port %d is held by PID %d (user ' % (deployment.port, squatter.pid)
               in problem for problem in fired['problems']), fired['problems']
    # Out of the router, and never back in: no admission, so the router never got the worker's key.
    assert [call for call in router.calls() if not call.startswith('GET')] == ['DELETE /workers/w-0']
    assert squatter.requests == [] and 'Bearer worker-key' not in squatter.authorizations()


def guard_option(deployment, run_id):
    return {'folder': str(deployment.guard_dir), 'run_id': run_id}


@pytest.mark.slow
def test_guard_restores_when_nothing_renews_its_lease_for_the_idle_bound(deployment, tmp_path):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start')
    assert not started.failed, started.get('msg')
    # The deadline is far away: only the idle bound can make the guard act within this test. The arm, the stop, a
    # change of a guarded file and the query run in one play (one ansible process: no start-up of Ansible between
    # them), so that even a loaded machine keeps the query inside the 8 s lease.
    window = run_tasks(tmp_path, [
        {'name': 'arm', 'gpuops.sglang.sglang_guard': deployment.guard_args(
            state='armed', run_id='run-1', deadline=600, idle=8)},
        {'name': 'stop', 'gpuops.sglang.sglang_server': deployment.server_args(
            state='stopped', guard=guard_option(deployment, 'run-1'))},
        {'name': 'patch', 'ansible.builtin.copy': {'dest': str(deployment.module_file), 'content': '# half-patched\n'}},
        # The controller is gone after this: nothing renews any more.
        {'name': 'query', 'gpuops.sglang.sglang_guard': deployment.guard_args(state='query')},
    ], name='window')
    armed, stopped, query = window['arm'], window['stop'], window['query']
    assert not armed.failed, armed.get('msg')
    assert armed['lease']['idle'] == 8 and armed['lease']['renewed_by'] == 'arm the guard'
    assert not stopped.failed, stopped.get('msg')
    assert not window['patch'].failed and not query.failed, (window['patch'].get('msg'), query.get('msg'))
    lease = query['lease']
    assert lease['renewed_by'] == 'sglang_server stopped (done)'
    assert lease['expires_at_boot'] == lease['renewed_at_boot'] + 8 and lease['acts_at'] == lease['expires_at']
    # The wall-clock times to come are the boot clock's carried over at the query: the same, but for drift.
    assert lease['expires_at'] == pytest.approx(lease['renewed_at'] + 8, abs=1)
    assert lease['deadline_at'] == pytest.approx(lease['armed_at'] + 600, abs=1)
    # Dropping the guard removes state.json, then the backups, then lease.json: wait for the last of them.
    wait_for(lambda: (deployment.guard_dir / 'fired.json').exists() and not
             (deployment.guard_dir / 'state.json').exists() and not (deployment.guard_dir / 'lease.json').exists(),
             8 + 30, 'the guard acting at its idle bound')
    report = json.loads((deployment.guard_dir / 'fired.json').read_text())
    assert report['bound'] == 'idle' and report['acted_by'] == 'idle' and report['healthy']
    # The watcher counts on the boot clock; a wall clock slewed by NTP may differ from it by milliseconds here.
    assert report['started_at'] >= lease['expires_at'] - 0.05, 'the guard acted before its lease lapsed'
    assert 'idle bound (8s)' in report['reason']
    assert health(deployment.port) == 200 and deployment.module_file.read_bytes() == b'# pre-run bytes \xe2\x9c\x93\n'
    assert not (deployment.guard_dir / 'lease.json').exists()
    # A step of the run that comes back after the restore changes nothing and says why.
    late = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                    deployment.server_args(state='stopped', guard=guard_option(deployment, 'run-1')), name='late')
    assert late.failed and 'the rollback guard of run run-1 is not armed' in late['msg']
    assert health(deployment.port) == 200


@pytest.mark.slow
def test_a_start_slower_than_the_idle_bound_renews_the_lease_and_is_never_rolled_back(deployment, tmp_path):
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-2', deadline=600, idle=10), name='arm')
    assert not armed.failed, armed.get('msg')
    stopped = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                       deployment.server_args(state='stopped', guard=guard_option(deployment, 'run-2')), name='stop')
    assert not stopped.failed, stopped.get('msg')
    # The new server "loads its model" for 2.5 idle bounds: /health answers 503 until then. The idle bound leaves
    # room for one ansible run between two steps on a loaded machine (over 5 s measured with the whole suite).
    deployment.write_launch(96, extra=['--warmup', '25'])
    restarted = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                         deployment.server_args(state='restarted', health_timeout=60,
                                                guard=guard_option(deployment, 'run-2')), name='restart')
    assert not restarted.failed, restarted.get('msg')
    assert restarted['healthy_at'] - restarted['started_at'] >= 25
    assert not (deployment.guard_dir / 'fired.json').exists()
    confirmed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                         deployment.guard_args(state='confirmed', run_id='run-2'), name='confirm')
    assert not confirmed.failed and confirmed['changed'], confirmed.get('msg')
    assert max_running_requests(deployment.port) == 96


def debug_messages(run, task):
    return [event['event_data']['res'].get('msg') for event in run.events
            if event.get('event') == 'runner_on_ok' and event['event_data'].get('task') == task]


@pytest.mark.slow
def test_rollback_playbook_needs_a_limit_restores_on_demand_and_guard_status_shows_the_lease(deployment, tmp_path):
    from helpers.ansible_run import run_playbook
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-9', deadline=900, idle=600), name='arm')
    assert not armed.failed, armed.get('msg')
    deployment.write_launch(96)
    inventory = tmp_path / 'hosts.yml'
    # The guard folder is sglang_guard_dir/sglang_service_name, as the role names it.
    inventory.write_text(json.dumps({'gpu': {'hosts': {'tiny': {
        'ansible_host': '127.0.0.1', 'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'sglang_guard_dir': str(deployment.guard_dir.parent), 'sglang_service_name': 'guard'}}}}))
    status = run_playbook(tmp_path, 'playbooks/guard_status.yml', str(inventory), name='status', cmdline='--check')
    assert status.rc == 0, status.stdout[-2000:]
    [shown] = debug_messages(status, 'Show it (host clock, UTC)')
    assert shown.startswith('armed by run run-9 since ') and 'by arm the guard; idle bound 600.0 s' in shown
    assert re.search(r"\(in \d+ s, counted on the host's boot clock\) unless renewed or confirmed", shown), shown
    assert 'unless renewed or confirmed; last restore: none' in shown
    refused = run_playbook(tmp_path, 'playbooks/rollback.yml', str(inventory), name='no-limit')
    assert refused.rc != 0 and (deployment.guard_dir / 'state.json').exists()
    assert any('name them with --limit' in message for message in refused.failure_messages('tiny'))
    reports = tmp_path / 'reports'
    reports.mkdir()
    rolled = run_playbook(tmp_path, 'playbooks/rollback.yml', str(inventory), name='rollback', limit='tiny',
                          extravars={'sglang_report_dir': str(reports)})
    assert rolled.rc == 0, rolled.stdout[-2000:]
    assert debug_messages(rolled, 'Say what the guard did') == [
        'rolled_back: 1 file(s) restored, the previous server serves again']
    written = json.loads((reports / 'tiny.rollback.json').read_text())
    assert written['bound'] == 'on_demand' and written['reason'] == 'rollback on demand' and written['healthy']
    assert health(deployment.port) == 200 and max_running_requests(deployment.port) == 64
    again = run_playbook(tmp_path, 'playbooks/rollback.yml', str(inventory), name='again', limit='tiny')
    assert again.rc == 0 and again.count('changed', 'tiny') == 0
    assert debug_messages(again, 'Say what the guard did') == [
        'no guard is armed on this host: nothing to roll back (last restore: rollback on demand)']


# --- issue 28: a tool that makes redeploys safe must not open doors ------------------------------------------

NOBODY = 65534


def as_nobody(argv):
    """Run argv as uid/gid 65534 (another local user of the gpu host); its exit status."""
    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.run(argv, preexec_fn=drop, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)


@pytest.mark.slow
@pytest.mark.parametrize('make_unsafe, why', [
    (lambda folder: os.chown(str(folder), NOBODY, NOBODY), 'belongs to uid 65534'),
    (lambda folder: os.chmod(str(folder), 0o770), 'writable by its group'),
    # Sticky like /tmp: others cannot remove our names, but they can take the free ones first.
    (lambda folder: os.chmod(str(folder), 0o1777), 'writable by its group and others (mode 1777)'),
], ids=['owned-by-another-user', 'group-writable', 'sticky-world-writable'])
def test_an_untrusted_guard_folder_is_refused_at_arm_before_anything_stops(deployment, tmp_path, trusted_dir,
                                                                          make_unsafe, why):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start')
    assert not started.failed, started.get('msg')
    # The folder above the guard folder (sglang_guard_dir) is the unsafe one; the guard folder does not exist yet.
    above = trusted_dir / 'shared'
    above.mkdir()
    make_unsafe(above)
    folder = above / 'guard'
    refused = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                       deployment.guard_args(state='armed', run_id='run-u', deadline=600, folder=str(folder)), name='arm')
    assert refused.failed and refused['msg'].startswith('the guard folder %s is not safe' % folder)
    assert why in refused['msg'] and str(above) in refused['msg']
    assert not folder.exists() and refused['armed'] is False
    assert health(deployment.port) == 200 and int((tmp_path / 'tiny.pid').read_text()) == started['pid']
    assert not watchers(folder)


@pytest.mark.slow
def test_the_guard_folder_and_what_it_makes_are_private_from_the_start(deployment, tmp_path):
    old = os.umask(0o022)
    try:
        armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                         deployment.guard_args(state='armed', run_id='run-p', deadline=600, idle=600), name='arm')
    finally:
        os.umask(old)
    assert not armed.failed, armed.get('msg')
    modes = {}
    for where, folders, files in os.walk(str(deployment.guard_dir)):
        for name in folders:
            modes[os.path.join(where, name)] = os.stat(os.path.join(where, name)).st_mode & 0o777
        for name in files:
            modes[os.path.join(where, name)] = os.stat(os.path.join(where, name)).st_mode & 0o777
    assert os.stat(str(deployment.guard_dir)).st_mode & 0o777 == 0o700
    assert modes and set(mode for path, mode in modes.items() if os.path.isdir(path)) == {0o700}, modes
    assert set(mode for path, mode in modes.items() if not os.path.isdir(path)) == {0o600}


@pytest.mark.slow
def test_the_watcher_never_acts_on_a_state_another_user_could_replace(deployment, tmp_path, trusted_dir):
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-w', deadline=600, idle=4), name='arm')
    assert not armed.failed, armed.get('msg')
    # Polling, not only started: this test is about the trust check of each poll. A folder moved while the watcher
    # still imports its code from lib/ inside it stops the watcher at that import instead (acting on nothing too).
    wait_for(lambda: watching(deployment.guard_dir), 10, 'the detached watcher polling')
    # An operator gives the folder above the guard folder away; its new owner swaps in a guard folder of their
    # own whose state names their launch configuration (the run id is in the watcher's command line).
    os.chown(str(trusted_dir), NOBODY, NOBODY)
    marker = tmp_path / 'ran-as-root'
    theirs = trusted_dir / 'theirs'
    hostile_launch = {'python': sys.executable, 'module': 'json.tool', 'args': ['/dev/null', str(marker)],
                      'environment': {}}
    script = '''
import json, os, sys
folder, theirs, launch, port = sys.argv[1:]
os.rename(folder, theirs + '-moved')
os.mkdir(folder)
with open(os.path.join(folder, 'launch.json'), 'w') as handle:
    handle.write(launch)
state = {'run_id': 'run-w', 'host': 'x', 'armed_at': 0, 'deadline': 1, 'idle': None, 'files': [],
         'server': {'manager': 'detached', 'service_name': 'x', 'launch_file': os.path.join(folder, 'launch.json'),
                    'pidfile': os.path.join(folder, 'pid'), 'log_file': os.path.join(folder, 'log'),
                    'base_url': 'http://127.0.0.1:%s' % port},
         'settings': {}, 'python': sys.executable, 'watcher': 'detached', 'unit': 'x'}
with open(os.path.join(folder, 'state.json'), 'w') as handle:
    json.dump(state, handle)
'''
    swapped = as_nobody(['/usr/bin/python3', '-c', script, str(deployment.guard_dir), str(theirs),
                         json.dumps(hostile_launch), str(deployment.port)])
    assert swapped.returncode == 0, swapped.stdout
    # The watcher sees the folder is not root's alone any more, says so in its log (opened at the arm, in the
    # folder the other user moved away) and leaves without acting.
    wait_for(lambda: not watchers(deployment.guard_dir), 30, 'the watcher leaving')
    log = (trusted_dir / 'theirs-moved' / 'watcher.log').read_text()
    assert 'refused to act' in log and 'belongs to uid 65534' in log
    assert not marker.exists() and not (deployment.guard_dir / 'fired.json').exists()
    assert health(deployment.port) == 200, 'the watcher stopped the server on a state it could not trust'
    os.chown(str(trusted_dir), 0, 0)


@pytest.mark.slow
def test_a_file_that_cannot_be_restored_fails_the_restore_starts_nothing_and_keeps_the_guard_owed(deployment, tmp_path):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start')
    assert not started.failed, started.get('msg')
    # Sorted first among the guard's files: the old restore stopped at it and skipped every other file.
    vanishing = tmp_path / 'a-config' / 'extra.json'
    vanishing.parent.mkdir()
    vanishing.write_text('{"pre-run": true}')
    files = [str(vanishing), str(deployment.launch), str(deployment.module_file), str(tmp_path / 'created-by-run.txt')]
    before = {path: open(path, 'rb').read() for path in files if os.path.exists(path)}
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-9', deadline=600, files=files), name='arm')
    assert not armed.failed, armed.get('msg')
    deployment.write_launch(96)
    deployment.module_file.write_bytes(b'# half-patched\n')
    (tmp_path / 'created-by-run.txt').write_text('new')
    shutil.rmtree(str(vanishing.parent))
    restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                        deployment.guard_args(state='restored', run_id='run-9', reason='the verify failed'),
                        name='restore')
    fired = restored['fired']
    assert restored.failed and fired['status'] == 'failed' and fired['healthy'] is False
    assert [entry['path'] for entry in fired['failed_files']] == [str(vanishing)]
    assert 'No such file or directory' in fired['failed_files'][0]['error']
    assert {entry['path']: entry['outcome'] for entry in fired['files']} == {
        str(vanishing): 'failed', str(deployment.launch): 'restored', str(deployment.module_file): 'restored',
        str(tmp_path / 'created-by-run.txt'): 'removed'}
    for path in files[1:]:
        assert (open(path, 'rb').read() if os.path.exists(path) else None) == before.get(path)
    # Nothing started on a half-restored tree, and the report says so.
    assert health(deployment.port) is None and 'start the previous server' not in fired['steps']
    assert any('no server was started' in problem for problem in fired['problems'])
    assert json.loads((deployment.guard_dir / 'fired.json').read_text()) == fired
    # The guard stays armed, owed a restore: no new arm, no confirm, no step of the run goes through.
    assert restored['armed'] and restored['armed_by'] == 'run-9'
    again = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-10', deadline=600), name='rearm')
    assert again.failed and 'could not write back %s' % vanishing in again['msg']
    confirm = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                       deployment.guard_args(state='confirmed', run_id='run-9'), name='confirm')
    assert confirm.failed and 'the guard acted before the run confirmed' in confirm['msg']
    late = run_task(tmp_path, 'gpuops.sglang.sglang_server',
                    deployment.server_args(state='started', guard={'folder': str(deployment.guard_dir),
                                                                   'run_id': 'run-9'}), name='late')
    assert late.failed and 'could not write back' in late['msg'] and health(deployment.port) is None
    # Once the cause is fixed, the next restore finishes it.
    vanishing.parent.mkdir()
    finished = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                        deployment.guard_args(state='restored', reason='folder back'), name='finish')
    assert not finished.failed, finished.get('msg')
    assert finished['fired']['status'] == 'rolled_back' and not finished['armed']
    assert vanishing.read_bytes() == before[str(vanishing)] and max_running_requests(deployment.port) == 64


class HostileRouter(object):
    """A router on loopback that answers every request with 200 and the given body, or trickles it."""

    def __init__(self, body, trickle=None):
        import http.server
        import threading
        import time
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                self.send_response(200)
                self.send_header('Content-Type', 'application/json')
                self.end_headers()
                if trickle is None:
                    self.wfile.write(body)
                    return
                for byte in body:
                    if outer.stopped:
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(trickle)
            do_DELETE = do_POST = do_GET

            def log_message(self, *args):
                pass

        self.requests = []
        self.stopped = False
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.stopped = True
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize('body, trickle', [
    (b'[' * 200000, None),
    (b' ' * 10000, 0.5),
], ids=['nested-brackets', 'trickle'])
def test_a_hostile_router_never_keeps_the_watcher_from_restoring(deployment, tmp_path, body, trickle):
    router = HostileRouter(body, trickle)
    try:
        assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
        armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                         deployment.guard_args(state='armed', run_id='run-h', deadline=600, idle=3, router={
                             'url': router.url, 'worker_url': deployment.server['url'], 'timeout': 1}),
                         name='arm')
        assert not armed.failed, armed.get('msg')
        deployment.write_launch(96)
        # The controller is gone: the watcher acts at the idle bound, whatever the router answers.
        wait_for(lambda: (deployment.guard_dir / 'fired.json').exists(), 3 + 16 + 60, 'the watcher restoring')
        report = json.loads((deployment.guard_dir / 'fired.json').read_text())
        assert report['status'] == 'rolled_back' and report['healthy'] and report['acted_by'] == 'idle'
        assert 'take the server out of the router' not in report['steps']
        # The bounded HTTP reader may name the failure itself: only the step and that it failed count here.
        assert any(p.startswith('take the server out of the router: ') for p in report['problems']), report['problems']
        assert report['router_readmitted'] is False and report['router_problem']
        assert not (deployment.guard_dir / 'state.json').exists() and router.requests
        assert health(deployment.port) == 200 and max_running_requests(deployment.port) == 64
    finally:
        router.stop()


def role_kill_patterns(launch_module, token):
    """The role's default sglang_kill_patterns, rendered for this launch module, each also requiring token in
    the command line: the machine runs other tests' servers and schedulers, which this test must not end."""
    import re
    import yaml
    with open(os.path.join(os.path.dirname(TINY_SERVER), '..', '..', '..', 'roles', 'sglang', 'defaults',
                           'main.yml')) as handle:
        patterns = yaml.safe_load(handle)['sglang_kill_patterns']
    return ['(?=.*%s)%s' % (re.escape(token), pattern.replace('{{ sglang_launch_module | regex_escape }}',
                                                                re.escape(launch_module)))
            for pattern in patterns]


def start_process(argv, user=None, env=None):
    def drop():
        os.setsid()
        if user is not None:
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
    return subprocess.Popen(argv, cwd='/', preexec_fn=drop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)


@pytest.mark.slow
def test_the_restore_ends_sglang_leftovers_of_the_servers_user_and_of_the_server_only_and_lists_them(deployment,
                                                                                                    tmp_path):
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    token = str(tmp_path)
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-k', deadline=600,
                                           kill_patterns=role_kill_patterns('tiny_server', token)), name='arm')
    assert not armed.failed, armed.get('msg')
    notes = tmp_path / 'notes-on-sglang.srt.md'
    notes.write_text('notes')
    log = tmp_path / 'sglang.bench.log'
    log.write_text('')
    sleeper = 'import time; time.sleep(600)'
    bystanders = [
        # An editor and a tail whose arguments name SGLang, and Python given sglang.srt as an argument.
        start_process(['bash', '-c', 'exec -a vim "$0" -c "$1" "$2"', sys.executable, sleeper, str(notes)]),
        start_process(['tail', '-f', str(log)]),
        start_process([sys.executable, '-c', sleeper, str(notes)]),
        start_process([sys.executable, '-c', sleeper, '-m', 'sglang.srt', token]),
        start_process([sys.executable, '-c', sleeper, '-m', 'tiny_server', token]),
        # Another user's own SGLang scheduler: never the server's.
        start_process(['bash', '-c', 'exec -a sglang::scheduler_TP1 /usr/bin/python3 -c "$0" "$1"', sleeper, token],
                      user=NOBODY),
    ]
    # What a crashed server leaves, of the server's user: an orphaned scheduler (retitled as setproctitle does)
    # and a second stand-in server on its port, run as `python -m <launch module>` (still loading: it never binds).
    loading = tmp_path / 'loading'
    loading.write_text('')
    stand_in = dict(os.environ, PYTHONPATH=os.path.dirname(TINY_SERVER))
    leftovers = [
        start_process(['bash', '-c', 'exec -a sglang::scheduler_TP0 "$0" -c "$1" "$2"', sys.executable, sleeper,
                       token]),
        start_process([sys.executable, '-m', 'tiny_server', '--port', str(deployment.port), '--load-hold-file',
                       str(loading), '--drain-hold-file', str(tmp_path / 'no-hold')], env=stand_in),
    ]
    # Another server's, of the same user: a stand-in on another port, and a scheduler with another server's marks.
    others = [
        start_process([sys.executable, '-m', 'tiny_server', '--port', str(free_port()),
                       '--drain-hold-file', str(tmp_path / 'no-hold')], env=stand_in),
        start_process(['bash', '-c', 'exec -a sglang::scheduler_TP0 "$0" -c "$1" "$2"', sys.executable, sleeper,
                       token], env=dict(os.environ, GPUOPS_SGLANG_SERVICE='tiny',
                                        GPUOPS_SGLANG_LAUNCH_FILE=str(tmp_path / 'b' / 'launch.json'))),
    ]
    bystanders += others
    try:
        every = bystanders + leftovers
        wait_for(lambda: all(open('/proc/%d/cmdline' % process.pid, 'rb').read().split(b'\0')[0] not in (b'bash', b'')
                             for process in every), 10, 'every process exec\'ed')
        restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='restored', run_id='run-k', reason='leftovers'), name='restore')
        assert not restored.failed, restored.get('msg')
        killed = restored['fired']['killed']
        assert sorted((entry['pid'], entry['user']) for entry in killed) == sorted(
            (process.pid, 'root') for process in leftovers)
        assert [entry['cmdline'] for entry in killed if entry['pid'] == leftovers[0].pid] == [
            'sglang::scheduler_TP0 -c %s %s' % (sleeper, token)]
        assert all(process.wait(10) is not None for process in leftovers)
        assert [process.poll() for process in bystanders] == [None] * len(bystanders), 'a bystander was killed'
        spared = dict((entry['pid'], entry['why']) for entry in restored['fired']['spared'])
        assert sorted(spared) == sorted(process.pid for process in others)
        assert 'another server than this one' in spared[others[0].pid] and 'launch file' in spared[others[1].pid]
        assert health(deployment.port) == 200
    finally:
        for process in bystanders + leftovers:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.slow
def test_a_restore_that_stops_before_the_files_keeps_the_guard_and_its_backups(deployment, tmp_path):
    original = deployment.module_file.read_bytes()
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-s', deadline=600), name='arm')
    assert not armed.failed, armed.get('msg')
    deployment.module_file.write_bytes(b'# NEW\n')
    # A state of an older collection, without a key the restore reads before it reaches the files.
    state_path = deployment.guard_dir / 'state.json'
    state = json.loads(state_path.read_text())
    del state['settings']
    state_path.write_text(json.dumps(state))
    restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                        deployment.guard_args(state='restored', run_id='run-s'), name='restore')
    fired = restored['fired']
    assert restored.failed and fired['status'] == 'failed' and fired['files_handled'] is False
    assert str(deployment.module_file) in [entry['path'] for entry in fired['failed_files']]
    assert any("KeyError: 'settings'" in problem for problem in fired['problems'])
    # Owed, not dropped: state.json, the backups and the run's bytes stay for the next restore to finish.
    assert restored['armed'] and json.loads(state_path.read_text())['restore_failed']['files']
    kept = [entry['backup'] for entry in state['files'] if entry['existed']]
    assert len(kept) == 2 and all(os.path.exists(backup) for backup in kept)
    assert deployment.module_file.read_bytes() == b'# NEW\n' != original
    refused = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                       deployment.guard_args(state='armed', run_id='run-t', deadline=600), name='arm-again')
    assert refused.failed and 'could not write back' in refused['msg']


@pytest.mark.slow
def test_one_outage_window_at_a_time_per_machine_and_the_restore_gives_it_back(deployment, tmp_path):
    machine = deployment.guard_dir.parent
    neighbour_dir = machine / 'guard-b'
    neighbour = dict(folder=str(neighbour_dir), server=dict(deployment.server, service_name='tiny-b'), files=[],
                     window_folder=str(machine), lock_timeout=1)
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(), name='start').failed
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                     deployment.guard_args(state='armed', run_id='run-a', deadline=600, window_folder=str(machine)),
                     name='arm a')
    assert not armed.failed, armed.get('msg')
    try:
        waited = run_task(tmp_path, 'gpuops.sglang.sglang_guard', dict(neighbour, state='armed', run_id='run-b'),
                          name='arm b while a is open')
        assert waited.failed and 'outage window of another server of this machine is open: tiny (run run-a' in \
            waited['msg'], waited.get('msg')
        assert not (neighbour_dir / 'state.json').exists()
        # The restore never waits for the window: it gives it back.
        restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                            deployment.guard_args(state='restored', run_id='run-a', reason='window test'), name='restore a')
        assert not restored.failed, restored.get('msg')
        second = run_task(tmp_path, 'gpuops.sglang.sglang_guard', dict(neighbour, state='armed', run_id='run-b'),
                          name='arm b')
        assert not second.failed, second.get('msg')
        assert json.loads((machine / 'window.json').read_text())['run_id'] == 'run-b'
        confirmed = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                             dict(folder=str(neighbour_dir), state='confirmed', run_id='run-b'), name='confirm b')
        assert not confirmed.failed, confirmed.get('msg')
        assert not (machine / 'window.json').exists()
    finally:
        if (neighbour_dir / 'state.json').exists():
            (neighbour_dir / 'state.json').unlink()
