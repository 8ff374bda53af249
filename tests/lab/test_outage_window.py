"""The outage window as a transaction, on the embedded lab: for every fault between "server stopped"
and "new server verified", the previous server serves afterwards (checked from outside on /health),
the launch configuration and site-packages are byte-identical to before the run, and the report says
what happened.

Faults are injected at a known point: the stand-in server's drain gate holds its drain (as requests in
flight would) until the test has broken something, and the step after the stop waits for that drain
(await_exit) before it signals anything; the fault lands before that step acts, or while it waits, and
that step fails either way, so nothing here depends on timing.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from helpers import lab_instance
from helpers.ansible_run import ANSIBLE_ENV, REPO
from helpers.lab_strays import orphan_in_container
from helpers.lab_window import (CHANGE, FAST_GUARD, GUARD_WAIT, artifacts, assert_rolled_back, fault_during_window,
                                files_state, fired, fired_or_none, report, run_in_background, stop_held,
                                wait_outage_started, wait_restored_by_guard)
from helpers.simulated import wait_for


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
    # A single-node server's start releases its GPUs in its own module run (release.yml): the start fails, unstarted.
    assert_rolled_back(lab, 'gpu2', before, run, 'were not released')
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
        # Which code reads the dynamic-speculation variable is not at stake (the env-mode rule, issue 43).
        extravars={'sglang_patch_file': str(note), 'sglang_dynamic_spec_env_read_by': 'installed'})
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
            run = fault_during_window(lab, tmp_path, 'gpu1',
                                      lambda: lab.podman('stop', '-t', '0', lab_instance.container('pve1')))
    finally:
        lab.restart_container('pve1')
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
    previous = dict((host.name, fired_or_none(host)) for host in hosts)
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', lab_instance.inventory(),
            os.path.join(REPO, 'playbooks/redeploy.yml'), '-e', json.dumps(dict(CHANGE, **FAST_GUARD))]
    env = dict(os.environ, **ANSIBLE_ENV)
    with stop_held(hosts):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        wait_outage_started(hosts)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
    for host in hosts:
        # The guard's report first: a server that answers /health may be the new one a start in flight went on to
        # start (its worker and ssh client outlive the kill of ansible-playbook's process group: docs/guard.md, "When
        # the controller is gone"), until the guard's deadline.
        wait_restored_by_guard(host, previous[host.name], GUARD_WAIT)
        print('%s restored %.1f s after the SIGKILL' % (host.name, time.monotonic() - killed))
        assert files_state(host) == before[host.name]
        assert fired(host)['status'] == 'rolled_back'
        # The controller-side report says the run was cut off, not a stale success.
        written = report(host.name)
        assert written['status'] == 'failed' and 'the run stopped inside the outage window' in written['reason']


def test_runner_cancel_mid_window_is_restored_by_the_guard(lab, tmp_path):
    host = lab['gpu2']
    before, previous = files_state(host), fired_or_none(host)
    with stop_held([host]):
        thread, holder = run_in_background(tmp_path, dict(CHANGE, **FAST_GUARD), 'cancel', limit='gpu2')
        wait_outage_started([host])
        holder['cancel'] = True
        thread.join(60)
    assert holder['run'].status == 'canceled'
    cancelled = time.monotonic()
    # ansible-runner's own cancel kills ansible-playbook's process group only: as after the SIGKILL above.
    wait_restored_by_guard(host, previous, GUARD_WAIT)
    print('gpu2 restored %.1f s after the cancel' % (time.monotonic() - cancelled))
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
    run = redeploy(CHANGE, name='check-change', cmdline='--check --diff')
    assert run.rc == 0, run.stdout[-3000:]
    summary = artifacts(run)['sglang_redeploy']
    output = run.stdout
    # The dry run's lines as the result shows them (a long line folded, each line of it coloured).
    flat = ' '.join(re.sub(r'\x1b\[[0-9;]*m', '', output).split())
    # The printed plan (shown with -v) names the batches: the lab's inventory asks for the whole fleet at once.
    plan = [event['event_data']['res']['msg'] for event in run.events if event.get('event') == 'runner_on_ok'
            and event['event_data'].get('task', '').startswith("Print the rollout's plan")]
    assert [lines[1:] for lines in plan] == [['batch 1: gpu1, gpu2']], plan
    for name in ('gpu1', 'gpu2'):
        pid = before[name][1]
        command = lab[name].exec_('sh', '-c', 'tr "\\0" " " < /proc/%d/cmdline' % pid).strip()
        assert summary[name]['check_mode'] is True
        assert 'would redeploy (check mode)' in summary[name]['reason']
        assert 'max_running_requests is 64, want 96' in summary[name]['reason']
        # What the stop would end (the server itself, its user and command line), and the flag it would change.
        assert {'pid': pid, 'user': 'root', 'cmdline': command, 'gpus': []} in summary[name]['would_kill']['stop']
        # The later steps await the stop's processes: they would end none of them.
        assert all(entry['pid'] not in [own['pid'] for own in summary[name]['would_kill']['stop']]
                   for step in ('kill', 'gpu_release') for entry in summary[name]['would_kill'][step])
        assert 'would end (stop): PID %d, user root: %s' % (pid, command) in flat
        assert {'flag': '--max-running-requests', 'live': '64', 'wanted': '96'} in summary[name]['flag_changes']
        assert summary[name]['deadline']['idle_s'] > 0 and summary[name]['deadline']['deadline_s'] > 0
        assert (files_state(lab[name]), lab[name].server_pid()) == before[name]
    assert 'flag --max-running-requests: 64 -> 96' in flat
    # --diff: the launch configuration as a unified diff, the live file against the one the window would write.
    assert '-    "64",' in output and '+    "96",' in output


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
