"""The guard as a lease, on the lab, with the role's DEFAULT timeouts (health 900 s, deadline 1800 s): only the idle
bound (sglang_rollback_idle) can bring a server back within these tests, since the deadline is half an hour away.

The idle bound itself is a setting like any other: what these tests prove is what the guard does when nothing renews
its lease (and that a live run keeps renewing it), not how long the default is (90 s; the unit tests of the rules
hold it). So each runs at the shortest bound the preflight lets through (plugins/plugin_utils/_rules.py,
renewal_gap): with a 5 s ssh connect timeout (`ansible-playbook --timeout 5`), 5 s x (1 + 0 retries) + 30 s of
controller slack = 35 s; the dashboard's cancel, whose runs keep ansible's default 10 s connect timeout, 40 s.
Faults are injected as in test_outage_window.py.
"""
import json
import os
import signal
import subprocess
import sys
import time

from gpuops_dashboard import redeploy as dashboard_redeploy
from gpuops_dashboard.run_processes import run_processes

from helpers import lab_instance
from helpers.ansible_run import ANSIBLE_ENV, REPO
from helpers.lab_window import (CHANGE, files_state, fired, fired_or_none, report, run_in_background, stats,
                                stop_held, wait_outage_started, wait_restored_by_guard)
from helpers.simulated import wait_for

# The role's default (roles/sglang/defaults/main.yml); the shortest the preflight allows with ansible's default 10 s
# connect timeout (the dashboard's runs), and with a 5 s one.
IDLE = 90
DASHBOARD_IDLE = 40
SHORT_CONNECT = 5
SHORT_IDLE = 35
TERM = 30
# The lab's inventory shortens them (deadline 80 s); these tests run with the role's defaults.
DEFAULTS = {'sglang_term_timeout': TERM, 'sglang_health_timeout': 900, 'sglang_gpu_release_timeout': 60,
            'sglang_rollback_deadline': 1800, 'sglang_rollback_idle': IDLE}
SHORT = dict(DEFAULTS, sglang_rollback_idle=SHORT_IDLE)
# What may pass after the controller is gone besides the idle bound: the step in flight finishing on the host (the
# held drain is let go at once, but a stop that waits may take its SIGTERM wait; a start whose ssh client outlived
# the SIGKILL of ansible-playbook's process group goes on until its server is healthy, renewing the lease meanwhile:
# docs/guard.md, "When the controller is gone"), then the restore itself (out of the router, stop, GPUs, start, the
# stand-in's warm-up, back into the router: the lab's router timeout 10 s and the guard's slack 15 s at most).
IN_FLIGHT_AND_RESTORE = TERM + 60


def assert_restored_by_the_idle_bound(host, before, since, what, previous, idle):
    """previous: the host's fired.json before the run (an earlier restore's), which must not be read as this one.

    The guard's report first: a server that answers /health may be the new one a start left running on the host
    started, until the guard's idle bound passes."""
    wait_restored_by_guard(host, previous, idle + IN_FLIGHT_AND_RESTORE)
    elapsed = time.monotonic() - since
    by_guard = fired(host)
    assert by_guard['bound'] == 'idle' and by_guard['acted_by'] == 'idle' and by_guard['status'] == 'rolled_back'
    assert files_state(host) == before
    assert host.server_info()['max_running_requests'] == 64
    print('%s restored %.1f s after %s (idle bound %s s; fired.json: %s)' % (
        host.name, elapsed, what, idle, by_guard['reason']))
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
            lab_instance.inventory(), os.path.join(REPO, 'playbooks/redeploy.yml'), '--timeout', str(SHORT_CONNECT),
            '-e', json.dumps(dict(CHANGE, **dict(SHORT, **budget)))]
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
        assert_restored_by_the_idle_bound(host, before[host.name], killed, 'the SIGKILL', previous[host.name],
                                          SHORT_IDLE)
        # The controller-side report says the run was cut off and when the guard acts, not a stale success.
        written = report(host.name)
        assert written['status'] == 'failed' and 'the run stopped inside the outage window' in written['reason']
        assert '%s s after its last renewal (sglang_rollback_idle)' % SHORT_IDLE in written['reason']
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
    """Cancelled as the dashboard cancels (gpuops_dashboard.redeploy: its cancel_callback kills the run's workers and
    their ssh clients, which left ansible-playbook's process group, then ansible-runner that group), once gpu2's
    server stopped."""
    host = lab['gpu2']
    before, previous = files_state(host), fired_or_none(host)
    with stop_held([host]):
        run = dashboard_redeploy.start(lab_instance.inventory(), limit='gpu2',
                                       extra_vars=dict(CHANGE, **dict(DEFAULTS, sglang_rollback_idle=DASHBOARD_IDLE)),
                                       runs_dir=str(tmp_path / 'runs'))
        wait_outage_started([host])
        # As an operator cancels: once the dashboard shows the host in its window (its events reach the dashboard
        # after the step began on the host; later under load).
        wait_for(lambda: dashboard_redeploy.expectations_after_cancel(run.records()).get('gpu2', {}).get('stage')
                 == 'in_window', 60, 'the dashboard seeing gpu2 in its window')
        notice = run.cancel()
        cancelled = time.monotonic()
        status = run.wait(120)
    # What the cancel ended on the controller: ansible-playbook, its workers (each in a session of its own) and their
    # ssh clients (gpuops_dashboard/run_processes.py); none of them is left.
    print('the cancel ended %s' % ', '.join('%s %d' % (kind, pid) for pid, kind in run.ended_processes or []))
    assert run.ended_processes and run_processes(run.private_data_dir) == []
    # What ansible-runner reports for a run its cancel_callback stopped.
    assert status == 'canceled', (status, run.rc, run.error)
    assert run.rc == 254
    assert notice['hosts']['gpu2']['stage'] == 'in_window'
    assert '%s s after the last step renewed its lease' % DASHBOARD_IDLE in notice['hosts']['gpu2']['expect']
    written = report('gpu2')
    assert written['status'] == 'failed' and 'the run stopped inside the outage window' in written['reason']
    assert '%s s after its last renewal (sglang_rollback_idle)' % DASHBOARD_IDLE in written['reason']
    assert_restored_by_the_idle_bound(host, before, cancelled, 'the cancel', previous, DASHBOARD_IDLE)


def test_lease_a_gpu_host_whose_sshd_stops_mid_window_restores_within_the_idle_bound(lab, tmp_path):
    """gpu1's sshd (and with it the step's session) stops once its server stopped: the controller loses the host,
    finishes the run without it and says so; the guard on gpu1 restores at the idle bound."""
    host = lab['gpu1']
    before, previous = files_state(host), fired_or_none(host)
    try:
        with stop_held([host]):
            thread, holder = run_in_background(tmp_path, dict(CHANGE, **SHORT), 'sshd-stopped', limit='gpu1',
                                               cmdline='--timeout %d' % SHORT_CONNECT)
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
        assert '%s s after its last renewal (sglang_rollback_idle)' % SHORT_IDLE in written['reason'], written['reason']
        assert_restored_by_the_idle_bound(host, before, cut_off, 'its sshd stopped', previous, SHORT_IDLE)
    finally:
        host.exec_('systemctl', 'start', 'lab-sshd.service')


def test_lease_a_start_slower_than_the_idle_bound_completes_without_a_rollback(lab, redeploy):
    host = lab['gpu2']
    previous = fired_or_none(host)
    # The stand-in "loads its model" for 50 s, above the 35 s idle bound: the health wait renews the lease.
    try:
        run = redeploy(dict(CHANGE, sglang_environment={'LAB_STANDIN_WARMUP': '50'}, **SHORT), name='slow',
                       limit='gpu2', cmdline='--timeout %d' % SHORT_CONNECT)
        assert run.rc == 0, run.stdout[-3000:]
        written = report('gpu2')
        assert written['status'] == 'redeployed' and written['healthy'] is True
        assert written['phases_s']['start'] >= 50 > SHORT_IDLE
        assert fired_or_none(host) == previous, 'the guard acted on a run that was alive'
        assert host.server_info()['max_running_requests'] == 96
    finally:
        # Back to the lab's settings: left serving with 96 and a 50 s warm-up, gpu2 is the "previous server" of the
        # next file's runs on this lab (make matrix: test_outage_window), whose restores it outlasts (their health
        # bound is 30 s, 10 s with the fast guard), and whose check mode finds 96 already there.
        back = redeploy(name='slow-back', limit='gpu2')
    assert back.rc == 0, back.stdout[-3000:]
    assert host.server_info()['max_running_requests'] == 64
    assert 'LAB_STANDIN_WARMUP' not in host.server_info()['environment']
