"""The outage window's faults on the lab, shared by test_outage_window.py and test_lease.py: the change a run
makes, what a run must leave as it was, the reports it writes, the stand-in's drain gate that holds a stop until the
test has broken something, and a run in the background as a dashboard starts one."""
import contextlib
import json
import os
import subprocess
import threading
import time

import ansible_runner

from helpers import lab_instance
from helpers.ansible_run import ANSIBLE_ENV, REPO
from helpers.simulated import wait_for

CHANGE = {'sglang_max_running_requests': 96}
REPORTS = lab_instance.reports_dir()
GATE = '/run/lab-standin-drain-gate'
# Short timeouts for the faults that wait for the guard: window budget 1 + 2*2 + 2*2 + 5 + 10 = 24 s.
FAST_GUARD = {'sglang_term_timeout': 2, 'sglang_gpu_release_timeout': 5, 'sglang_health_timeout': 10,
              'sglang_drain_timeout': 1, 'sglang_router_timeout': 2, 'sglang_rollback_deadline': 24}
# How long a test waits for a guard to have restored: its deadline, then a stop, a start and /health.
GUARD_WAIT = FAST_GUARD['sglang_rollback_deadline'] + 25


def files_state(host):
    watched = ('/etc/sglang/launch.json', host.sglang_file('srt/speculative/eagle_worker.py'),
               host.sglang_file('version.py'))
    state = dict((path, host.sha256(path)) for path in watched)
    if host.name == 'gpu1':
        state['unit'] = host.sha256('/etc/systemd/system/sglang.service')
    return state


def report(name):
    with open(os.path.join(REPORTS, name + '.json')) as handle:
        return json.load(handle)


def fired(host):
    return json.loads(host.exec_('cat', '/var/lib/gpuops-sglang/sglang/fired.json'))


def fired_or_none(host):
    try:
        return fired(host)
    except subprocess.CalledProcessError:
        return None


def wait_restored_by_guard(host, previous, timeout):
    """Until the host's guard reported a restore (fired.json, written once the previous server is healthy and back
    in its router) other than `previous`, then until the host serves (its /health may answer slowly under load)."""
    try:
        wait_for(lambda: fired_or_none(host) not in (None, previous), timeout, '%s: the guard report' % host.name)
    except AssertionError as exc:
        # What the guard left, to tell a guard that never acted from one still restoring.
        raise AssertionError('%s; the guard folder: %s' % (exc, host.exec_(
            'sh', '-c', 'ls -la /var/lib/gpuops-sglang/sglang; tail -n 20 /var/lib/gpuops-sglang/sglang/watcher.log'
            ' 2>&1; journalctl -u "gpuops-sglang-guard-*" -n 20 --no-pager 2>&1 || true')))
    wait_for(host.healthy, 30, '%s serving after its guard restored it' % host.name)


@contextlib.contextmanager
def stop_held(hosts):
    """Hold each server's drain until the with-block ends (the step after the stop waits for it)."""
    for host in hosts:
        host.exec_('touch', GATE)
    try:
        yield
    finally:
        for host in hosts:
            host.exec_('rm', '-f', GATE)


# Where the stop writes when it began (the role's stop_marker: sglang_run_dir/SERVICE.stopped_at).
STOP_MARKER = '/run/sglang/sglang.stopped_at'


def stopped_since(host, since):
    """True once the host's server was sent its stop at or after `since` (time.time(); the containers share the
    host's clock)."""
    try:
        return float(host.exec_('cat', STOP_MARKER)) >= since
    except (subprocess.CalledProcessError, ValueError):
        return False


def wait_outage_started(hosts, timeout=180):
    """Until each host's server stopped serving because this run stopped it: /health failing alone may be a slow
    answer on a loaded machine (its 5 s timeout), with the run still before its window.

    The run's preflight and preparation come first: about 20 s on an idle machine, over 60 s seen with the whole
    suite beside it. The bound only matters when the run never gets there."""
    since = time.time() - 1
    for host in hosts:
        wait_for(lambda: not host.healthy() and stopped_since(host, since), timeout, '%s stopping' % host.name)


def run_in_background(tmp_path, extravars, name, limit=None, cmdline=None):
    """ansible-runner in a thread, as a dashboard runs it. Returns (thread, holder): set holder['cancel']
    to cancel the run (noticed within 0.2 s); holder['run'] is the runner once the thread is done."""
    holder = {'cancel': False}
    private = tmp_path / name
    private.mkdir(parents=True, exist_ok=True)

    def target():
        holder['run'] = ansible_runner.run(
            private_data_dir=str(private), playbook=os.path.join(REPO, 'playbooks/redeploy.yml'),
            inventory=lab_instance.inventory(), extravars=extravars, limit=limit,
            cmdline=cmdline, envvars=ANSIBLE_ENV, quiet=True, settings={'pexpect_timeout': 0.2},
            cancel_callback=lambda: holder['cancel'])
    thread = threading.Thread(target=target)
    thread.start()
    return thread, holder


def stats(runner):
    for event in runner.events:
        if event.get('event') == 'playbook_on_stats':
            return event['event_data']
    return {}


def artifacts(runner):
    for event in runner.events:
        if event.get('event') == 'playbook_on_stats':
            return event['event_data'].get('artifact_data', {})
    return {}


def fault_during_window(lab, tmp_path, host_name, inject, extravars=None, name='fault'):
    """Run a changing redeploy of one host, break something once its stop began, return the finished run."""
    host = lab[host_name]
    with stop_held([host]):
        thread, holder = run_in_background(tmp_path, dict(CHANGE, **(extravars or {})), name, limit=host_name)
        wait_outage_started([host])
        inject()
    thread.join(300)
    assert not thread.is_alive(), 'the run did not finish'
    return holder['run']


def assert_rolled_back(lab, host_name, before, run, words):
    host = lab[host_name]
    assert run.rc != 0
    assert host.healthy()
    assert files_state(host) == before
    assert host.server_info()['max_running_requests'] == 64
    written = report(host_name)
    assert written['status'] == 'rolled_back', written
    assert written['healthy'] is True
    assert words in written['reason'], written['reason']
    assert 'the previous server serves again' in written['reason']
    assert written['downtime_s'] > 0
    print('%s: rolled back, previous server serving %.2f s after the stop (report, host clock)'
          % (host_name, written['downtime_s']))
    # The same summary reaches ansible-runner's artifacts, keyed by host.
    assert artifacts(run)['sglang_redeploy'][host_name]['status'] == 'rolled_back'
