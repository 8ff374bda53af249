"""The outage window as a transaction, on the embedded lab: for every fault between "server stopped"
and "new server verified", the previous server serves afterwards (checked from outside on /health),
the launch configuration and site-packages are byte-identical to before the run, and the report says
what happened.

Faults are injected at a known point: the stand-in server's drain gate holds its drain (as requests in
flight would) until the test has broken something, and the step after the stop waits for that drain
(await_exit) before it signals anything; the fault lands before that step acts, or while it waits, and
that step fails either way, so nothing here depends on timing.
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import ansible_runner

from gpuops_dashboard import redeploy as dashboard_redeploy

from helpers.ansible_run import ANSIBLE_ENV, REPO
from helpers.lab_strays import orphan_in_container
from helpers.simulated import wait_for

CHANGE = {'sglang_max_running_requests': 96}
REPORTS = os.path.join(REPO, '.cache', 'lab', 'reports')
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


def wait_outage_started(hosts, timeout=60):
    for host in hosts:
        wait_for(lambda: not host.healthy(), timeout, '%s stopping' % host.name)


def run_in_background(tmp_path, extravars, name, limit=None):
    """ansible-runner in a thread, as a dashboard runs it. Returns (thread, holder): set holder['cancel']
    to cancel the run (noticed within 0.2 s); holder['run'] is the runner once the thread is done."""
    holder = {'cancel': False}
    private = tmp_path / name
    private.mkdir(parents=True, exist_ok=True)

    def target():
        holder['run'] = ansible_runner.run(
            private_data_dir=str(private), playbook=os.path.join(REPO, 'playbooks/redeploy.yml'),
            inventory=os.path.join(REPO, 'inventory/lab'), extravars=extravars, limit=limit,
            envvars=ANSIBLE_ENV, quiet=True, settings={'pexpect_timeout': 0.2},
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


def test_container_kill_failure_rolls_back(lab, tmp_path):
    before = files_state(lab['gpu1'])
    pve = lab['pve1']
    try:
        with orphan_in_container():
            run = fault_during_window(lab, tmp_path, 'gpu1', lambda: pve.exec_(
                'sh', '-c', 'echo "lxc-attach: simulated failure" >/etc/pve-sim/fail-exec'))
    finally:
        pve.exec_('rm', '-f', '/etc/pve-sim/fail-exec')
    assert_rolled_back(lab, 'gpu1', before, run, 'Stop what is left of SGLang inside the container')


def test_gpu_release_failure_rolls_back(lab, tmp_path):
    host = lab['gpu2']
    before = files_state(host)
    try:
        run = fault_during_window(lab, tmp_path, 'gpu2', lambda: host.exec_(
            'sh', '-c', 'echo "Unable to determine the device handle for GPU0: Unknown Error" '
                        '>/var/lib/nvidia-smi-sim/fail'))
    finally:
        host.exec_('rm', '-f', '/var/lib/nvidia-smi-sim/fail')
    assert_rolled_back(lab, 'gpu2', before, run, 'Release the GPUs')
    # The guard could not read the GPUs either, and says so rather than hiding it.
    assert any('wait for the GPUs' in problem for problem in report('gpu2')['rollback']['problems'])


def test_patch_failure_in_window_restores_site_packages_byte_for_byte(lab, tmp_path):
    host = lab['gpu2']
    first_line = host.exec_('head', '-1', host.sglang_file('version.py')).rstrip('\n')
    note = tmp_path / 'version-note.diff'
    note.write_text('--- a/sglang/version.py\n+++ b/sglang/version.py\n@@ -1 +1 @@\n-{0}\n+{0}  # note\n'
                    .format(first_line))
    before = files_state(host)
    # Once the stop began, the file the patch needs changes under it: the dry-run passed, the apply fails.
    run = fault_during_window(lab, tmp_path, 'gpu2', lambda: host.exec_(
        'sed', '-i', '1s/$/  # changed behind the run/', host.sglang_file('version.py')),
        extravars={'sglang_patch_file': str(note)})
    assert_rolled_back(lab, 'gpu2', before, run, 'Apply the patch')


def test_copy_failure_rolls_back(lab, tmp_path):
    host = lab['gpu1']
    before = files_state(host)
    run = fault_during_window(lab, tmp_path, 'gpu1', lambda: host.exec_('rm', '/etc/sglang/launch.next.json'))
    # The restart moves the configuration into place (activate) before it starts anything.
    assert_rolled_back(lab, 'gpu1', before, run, 'cannot put the launch configuration in place')


def test_server_reporting_other_settings_rolls_back(lab, redeploy):
    before = dict((name, files_state(lab[name])) for name in ('gpu1', 'gpu2'))
    # argparse keeps the last value: the server runs with 50, not the 96 the role asked for.
    run = redeploy(dict(CHANGE, sglang_extra_args=['--max-running-requests', '50']), name='mismatch')
    for name in ('gpu1', 'gpu2'):
        assert_rolled_back(lab, name, before[name], run, 'max_running_requests is 50, want 96')


def test_unreachable_proxmox_node_rolls_back(lab, tmp_path):
    before = files_state(lab['gpu1'])
    try:
        with orphan_in_container():
            run = fault_during_window(lab, tmp_path, 'gpu1', lambda: lab.podman('stop', '-t', '0', 'lab-pve1'))
    finally:
        lab.restart_container('lab-pve1')
    assert_rolled_back(lab, 'gpu1', before, run, 'could not be reached')


def test_gpu_host_unreachable_in_window_is_restored_by_its_guard(lab, tmp_path):
    host = lab['gpu1']
    before = files_state(host)
    try:
        run = fault_during_window(lab, tmp_path, 'gpu1',
                                  lambda: host.exec_('systemctl', 'stop', 'lab-sshd.service'), extravars=FAST_GUARD)
        assert run.rc != 0
        stopped = time.monotonic()
        # The controller gave up on the host; the guard on the host acts at its deadline.
        written = report('gpu1')
        assert written['status'] == 'failed' and written['healthy'] is False
        assert 'the guard on the host restores the previous server' in written['reason']
        wait_for(host.healthy, GUARD_WAIT, 'gpu1 serving again through its guard')
        print('gpu1 served again %.1f s after the run gave up' % (time.monotonic() - stopped))
    finally:
        host.exec_('systemctl', 'start', 'lab-sshd.service')
    assert files_state(host) == before
    by_guard = fired(host)
    assert by_guard['acted_by'] == 'deadline' and by_guard['status'] == 'rolled_back'
    assert host.server_info()['max_running_requests'] == 64


def test_sigkilled_playbook_is_restored_by_the_guards_without_a_rerun(lab, tmp_path):
    hosts = [lab['gpu1'], lab['gpu2']]
    before = dict((host.name, files_state(host)) for host in hosts)
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', os.path.join(REPO, 'inventory/lab'), os.path.join(REPO, 'playbooks/redeploy.yml'),
            '-e', json.dumps(dict(CHANGE, **FAST_GUARD))]
    env = dict(os.environ, **ANSIBLE_ENV)
    with stop_held(hosts):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        wait_outage_started(hosts)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
    for host in hosts:
        wait_for(host.healthy, GUARD_WAIT, '%s serving again through its guard' % host.name)
        print('%s served again %.1f s after the SIGKILL' % (host.name, time.monotonic() - killed))
        assert files_state(host) == before[host.name]
        assert fired(host)['status'] == 'rolled_back'
        # The controller-side report says the run was cut off, not a stale success.
        written = report(host.name)
        assert written['status'] == 'failed' and 'the run stopped inside the outage window' in written['reason']


def test_runner_cancel_mid_window_is_restored_by_the_guard(lab, tmp_path):
    host = lab['gpu2']
    before = files_state(host)
    with stop_held([host]):
        thread, holder = run_in_background(tmp_path, dict(CHANGE, **FAST_GUARD), 'cancel', limit='gpu2')
        wait_outage_started([host])
        holder['cancel'] = True
        thread.join(60)
    assert holder['run'].status == 'canceled'
    cancelled = time.monotonic()
    wait_for(host.healthy, GUARD_WAIT, 'gpu2 serving again through its guard')
    print('gpu2 served again %.1f s after the cancel' % (time.monotonic() - cancelled))
    assert files_state(host) == before
    assert fired(host)['acted_by'] == 'deadline'


def test_new_run_takes_over_an_armed_guard(lab, tmp_path, redeploy):
    host = lab['gpu2']
    before = files_state(host)
    with stop_held([host]):
        thread, holder = run_in_background(tmp_path, dict(CHANGE, sglang_rollback_deadline=600), 'cut',
                                           limit='gpu2')
        wait_outage_started([host])
        holder['cancel'] = True
        thread.join(60)
    # The cut-off run's guard waits 600 s; a new run restores its pre-run state at once, then proceeds.
    assert json.loads(host.exec_('cat', '/var/lib/gpuops-sglang/sglang/state.json'))['run_id']
    run = redeploy(name='takeover', limit='gpu2')
    assert run.rc == 0, run.stdout[-3000:]
    taken = report('gpu2')['takeover']
    assert taken['acted_by'] == 'takeover' and taken['status'] == 'rolled_back'
    assert report('gpu2')['status'] == 'unchanged'
    assert files_state(host) == before and host.healthy()
    assert 'state.json' not in host.exec_('ls', '/var/lib/gpuops-sglang/sglang').split()


def test_check_mode_on_a_lab_that_would_change_reports_why_and_changes_nothing(lab, redeploy):
    before = dict((name, (files_state(lab[name]), lab[name].server_pid())) for name in ('gpu1', 'gpu2'))
    run = redeploy(CHANGE, name='check-change', cmdline='--check')
    assert run.rc == 0, run.stdout[-3000:]
    summary = artifacts(run)['sglang_redeploy']
    for name in ('gpu1', 'gpu2'):
        assert summary[name]['check_mode'] is True
        assert 'would redeploy (check mode)' in summary[name]['reason']
        assert 'max_running_requests is 64, want 96' in summary[name]['reason']
        assert (files_state(lab[name]), lab[name].server_pid()) == before[name]


def test_a_poll_interval_of_zero_is_refused_before_anything_runs(lab, redeploy):
    pids = dict((name, lab[name].server_pid()) for name in ('gpu1', 'gpu2'))
    run = redeploy(dict(CHANGE, sglang_health_poll_interval=0), name='zero-interval')
    assert run.rc != 0
    for name in ('gpu1', 'gpu2'):
        written = report(name)
        assert written['status'] == 'failed' and written['healthy'] is True
        assert written['reason'].startswith('nothing was stopped')
        assert 'sglang_health_poll_interval must be above 0' in written['reason']
        assert lab[name].server_pid() == pids[name]


# --- the guard as a lease, with the role's DEFAULT timeouts (health 900 s, deadline 1800 s) -------------------
# Only the idle bound can bring a server back within these tests: the deadline is half an hour away.
IDLE = 90
TERM = 30
# The lab's inventory shortens them (deadline 70 s); these tests run with the role's defaults.
DEFAULTS = {'sglang_term_timeout': TERM, 'sglang_health_timeout': 900, 'sglang_gpu_release_timeout': 60,
            'sglang_rollback_deadline': 1800, 'sglang_rollback_idle': IDLE}
# What may pass after the controller is gone besides the idle bound: the step in flight finishing on the host
# (the held drain is let go at once, but a stop that waits may take its SIGTERM wait), then the restore itself
# (stop, GPUs, start, the stand-in's 1.5 s warm-up).
IN_FLIGHT_AND_RESTORE = TERM + 60


def assert_restored_by_the_idle_bound(host, before, since, what, previous):
    """previous: the host's fired.json before the run (an earlier restore's), which must not be read as this one."""
    wait_for(host.healthy, IDLE + IN_FLIGHT_AND_RESTORE, '%s serving again through its lease' % host.name)
    elapsed = time.monotonic() - since
    # The guard writes fired.json once the previous server is healthy (and back in its router).
    wait_for(lambda: fired_or_none(host) not in (None, previous), 30, '%s: the guard report' % host.name)
    by_guard = fired(host)
    assert by_guard['bound'] == 'idle' and by_guard['acted_by'] == 'idle' and by_guard['status'] == 'rolled_back'
    assert files_state(host) == before
    assert host.server_info()['max_running_requests'] == 64
    print('%s served again %.1f s after %s (idle bound %s s; fired.json: %s)' % (
        host.name, elapsed, what, IDLE, by_guard['reason']))
    return elapsed


def slots(folder):
    return dict((name[:-5], json.loads((folder / name).read_text()))
                for name in os.listdir(str(folder)) if name.endswith('.json'))


def test_lease_a_batch_cut_off_by_a_sigkill_restores_within_the_idle_bound_and_its_slots_lapse(lab, tmp_path):
    """One batch of two hosts, each holding a slot of the fleet's budget; ansible-playbook is SIGKILLed with its
    process group once both servers stopped."""
    hosts = [lab['gpu1'], lab['gpu2']]
    before = dict((host.name, files_state(host)) for host in hosts)
    previous = dict((host.name, fired_or_none(host)) for host in hosts)
    folder = tmp_path / 'slots'
    budget = {'redeploy_max_unavailable': 2, 'sglang_fleet_slot_dir': str(folder)}
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i',
            os.path.join(REPO, 'inventory/lab'), os.path.join(REPO, 'playbooks/redeploy.yml'),
            '-e', json.dumps(dict(CHANGE, **dict(DEFAULTS, **budget)))]
    with stop_held(hosts):
        proc = subprocess.Popen(argv, env=dict(os.environ, **ANSIBLE_ENV), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        wait_outage_started(hosts)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
    # Both hosts were down at once, each in its slot, held by the run just killed.
    held = slots(folder)
    assert sorted(held) == ['gpu1', 'gpu2'] and set(slot['pid'] for slot in held.values()) == {proc.pid}
    for host in hosts:
        # gpu1 runs its watcher as a systemd service, gpu2 as a detached process.
        assert_restored_by_the_idle_bound(host, before[host.name], killed, 'the SIGKILL', previous[host.name])
        # The controller-side report says the run was cut off and when the guard acts, not a stale success.
        written = report(host.name)
        assert written['status'] == 'failed' and 'the run stopped inside the outage window' in written['reason']
        assert '%s s after its last renewal (sglang_rollback_idle)' % IDLE in written['reason']
    # The dead run's slots lapsed: with room for one server down, a new run of gpu1 does not wait for them.
    run = subprocess.run([argv[0], '-i', argv[2], argv[3], '--limit', 'gpu1', '-e', json.dumps(dict(
        budget, redeploy_max_unavailable=1, sglang_fleet_wait_timeout=2, sglang_force_restart=True))],
        env=dict(os.environ, **ANSIBLE_ENV), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True)
    assert run.returncode == 0, run.stdout[-3000:]
    written = report('gpu1')
    assert written['status'] == 'redeployed' and written['fleet_slot']['held_by'] == [], written
    assert 'gpu2' in slots(folder) and 'gpu1' not in slots(folder)


def test_lease_an_ansible_runner_cancel_restores_within_the_idle_bound(lab, tmp_path):
    """Cancelled as the dashboard cancels (gpuops_dashboard.redeploy: ansible-runner's cancel_callback, which
    SIGKILLs ansible-playbook's process group), once gpu2's server stopped."""
    host = lab['gpu2']
    before, previous = files_state(host), fired_or_none(host)
    with stop_held([host]):
        run = dashboard_redeploy.start('inventory/lab', limit='gpu2', extra_vars=dict(CHANGE, **DEFAULTS),
                                       runs_dir=str(tmp_path / 'runs'))
        wait_outage_started([host])
        notice = run.cancel()
        cancelled = time.monotonic()
        status = run.wait(120)
    # What ansible-runner reports for a run its cancel_callback stopped.
    assert status == 'canceled', (status, run.rc, run.error)
    assert run.rc == 254
    assert notice['hosts']['gpu2']['stage'] == 'in_window'
    assert '%s s after the last step renewed its lease' % IDLE in notice['hosts']['gpu2']['expect']
    written = report('gpu2')
    assert written['status'] == 'failed' and 'the run stopped inside the outage window' in written['reason']
    assert '%s s after its last renewal (sglang_rollback_idle)' % IDLE in written['reason']
    assert_restored_by_the_idle_bound(host, before, cancelled, 'the cancel', previous)


def test_lease_a_gpu_host_whose_sshd_stops_mid_window_restores_within_the_idle_bound(lab, tmp_path):
    """gpu1's sshd (and with it the step's session) stops once its server stopped: the controller loses the host,
    finishes the run without it and says so; the guard on gpu1 restores at the idle bound."""
    host = lab['gpu1']
    before, previous = files_state(host), fired_or_none(host)
    try:
        with stop_held([host]):
            thread, holder = run_in_background(tmp_path, dict(CHANGE, **DEFAULTS), 'sshd-stopped', limit='gpu1')
            wait_outage_started([host])
            # Counted from the stop's request: systemd signals sshd and its sessions at once, but the stop
            # itself may wait (up to its 90 s stop timeout) for a session process to end.
            cut_off = time.monotonic()
            host.exec_('systemctl', 'stop', 'lab-sshd.service')
            print('gpu1: systemctl stop lab-sshd.service returned after %.1f s' % (time.monotonic() - cut_off))
        thread.join(300)
        assert not thread.is_alive(), 'the run did not finish'
        # The run is not cancelled: it ends on its own, failed, the host unreachable.
        run = holder['run']
        assert run.status == 'failed' and run.rc != 0
        assert 'gpu1' in stats(run)['dark'], stats(run)
        written = report('gpu1')
        assert written['status'] == 'failed' and written['healthy'] is False, written
        assert '%s s after its last renewal (sglang_rollback_idle)' % IDLE in written['reason'], written['reason']
        assert_restored_by_the_idle_bound(host, before, cut_off, 'its sshd stopped', previous)
    finally:
        host.exec_('systemctl', 'start', 'lab-sshd.service')


def fired_or_none(host):
    try:
        return fired(host)
    except subprocess.CalledProcessError:
        return None


def test_lease_a_start_slower_than_the_idle_bound_completes_without_a_rollback(lab, redeploy):
    host = lab['gpu2']
    previous = fired_or_none(host)
    # The stand-in "loads its model" for 120 s, above the 90 s idle bound: the health wait renews the lease.
    run = redeploy(dict(CHANGE, sglang_environment={'LAB_STANDIN_WARMUP': '120'}, **DEFAULTS), name='slow', limit='gpu2')
    assert run.rc == 0, run.stdout[-3000:]
    written = report('gpu2')
    assert written['status'] == 'redeployed' and written['healthy'] is True
    assert written['phases_s']['start_to_healthy'] >= 120
    assert fired_or_none(host) == previous, 'the guard acted on a run that was alive'
    assert host.server_info()['max_running_requests'] == 96
