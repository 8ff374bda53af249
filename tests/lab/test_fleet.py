"""A fleet of three lab gpu hosts behind the SGLang project's gateway (smg 1.13, started by the lab).

gpu3 is the lab's Debian 13 host under systemd (an LXC container on pve2), beside gpu1 (Debian 12, systemd)
and gpu2 (Debian 13, no systemd): the fleet covers the systemd unit on both Debian releases.

Every test starts from the fleet as the module fixture leaves it: three servers redeployed, healthy, all in
the router. What a test breaks, it mends before it ends. Requests are held in flight by the stand-in's
generation gate, not by guessing a delay, so nothing here depends on timing.
"""
import json
import os
import subprocess
import sys
import threading
import urllib.request

import pytest

from helpers.ansible_run import REPO, run_playbook
from helpers.simulated import wait_for
from helpers import lab_instance

ROUTER = lab_instance.router_url()
FLEET = ('gpu1', 'gpu2', 'gpu3')
INVENTORY = [lab_instance.inventory(), lab_instance.fleet_inventory()]
REPORTS = lab_instance.reports_dir()
LOAD = os.path.join(REPO, 'bench', 'load.py')
GENERATE_GATE = '/run/lab-standin-generate-gate'


def http_json(method, url, document=None, timeout=10):
    body = json.dumps(document).encode() if document is not None else None
    request = urllib.request.Request(url, data=body, method=method, headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b'null')


def router_urls():
    return sorted(worker['url'] for worker in http_json('GET', ROUTER + '/workers')['workers'])


def url(lab, name):
    return lab_instance.server_url(name)


def in_flight(lab, name):
    return http_json('GET', url(lab, name) + '/v1/loads')['aggregate']['total_reqs']


def report(name):
    with open(os.path.join(REPORTS, name + '.json')) as handle:
        return json.load(handle)


@pytest.fixture(scope='module')
def fleet(lab, tmp_path_factory):
    """Three gpu hosts (gpu3 added to the running lab), each redeployed once and in the router; gpu3 removed
    again after the module (out of the router, its container and report gone): the lab files run after this
    one on the same lab (make matrix) start from the session fixture's lab, e.g. test_canary_bake compares the
    router's workers with gpu1 and gpu2 and its load goes through every worker."""
    try:
        with lab_instance.one_start_at_a_time():
            lab_instance.lab('up', env=dict(os.environ, LAB_GPU_HOSTS='3'))
            lab.add_host('gpu3')
            baseline = run_playbook(tmp_path_factory.mktemp('fleet'), 'playbooks/redeploy.yml', INVENTORY)
        assert baseline.rc == 0, baseline.stdout[-3000:]
        assert router_urls() == sorted(url(lab, name) for name in FLEET)
        yield lab
    finally:
        lab.remove_hosts('gpu3')


@pytest.fixture
def rollout(tmp_path):
    def run(extravars=None, name='rollout', limit=None, inventory=()):
        return run_playbook(tmp_path, 'playbooks/redeploy.yml', INVENTORY + list(inventory), extravars, name=name,
                            limit=limit)
    return run


def pids(fleet):
    return dict((name, fleet[name].server_pid()) for name in FLEET)


def test_rolling_redeploy_under_load_drops_no_request(fleet, rollout, tmp_path):
    before = pids(fleet)
    stop_file = tmp_path / 'stop-load'
    load = subprocess.Popen(
        [sys.executable, LOAD, '--url', ROUTER, '--rate', '20', '--concurrency', '8', '--max-duration', '300',
         # A stopped server refuses at once; 5 s keeps a stand-in starved of CPU by the suite beside it (all three
         # missed 0.5 s at one moment, seen in a CI run with no request failed) from counting as down.
         '--stop-file', str(stop_file), '--health-timeout', '5']
        + ['--health=%s/health' % url(fleet, name) for name in FLEET],
        stdout=subprocess.PIPE, universal_newlines=True)
    wait_for(lambda: sum(in_flight(fleet, name) for name in FLEET) > 0, 30, 'requests in flight through the router')
    run = rollout({'sglang_force_restart': True, 'redeploy_serial': 1, 'redeploy_max_unavailable': 1}, name='rolling')
    stop_file.write_text('')
    measured = json.loads(load.communicate(timeout=120)[0].strip().splitlines()[-1])
    assert run.rc == 0, run.stdout[-3000:]
    assert measured['requests_total'] > 0 and measured['requests_failed'] == 0, measured
    # One server out at a time (max_unavailable 1), measured from outside.
    assert measured['min_healthy'] >= 2, measured
    after = pids(fleet)
    for name in FLEET:
        written = report(name)
        assert written['status'] == 'redeployed' and written['healthy'] is True, written
        assert written['router']['member_before'] is True and written['router']['removed'] is True
        assert written['router']['readmitted'] is True and written['router']['drain']['idle'] is True
        assert after[name] != before[name]
    assert router_urls() == sorted(url(fleet, name) for name in FLEET)


def test_the_debian_13_host_runs_the_server_as_a_systemd_unit_and_is_redeployed_through_it(fleet, rollout,
                                                                                           tmp_path):
    host = fleet['gpu3']
    assert host.target() == ('13', '3.13')
    before = host.server_pid()
    # The router holds gpu3 by address (lab/lab registered it so); the inventory names it, by a name gpu3 resolves
    # (issue 43: the run took it for drained by an operator and kept it in the router through the outage).
    named = tmp_path / 'named.yml'
    named.write_text(json.dumps({'gpu': {'hosts': {'gpu3': {
        'sglang_router_worker_url': 'http://gpu3.lab:%d' % lab_instance.describe()['server_port']}}}}))
    host.exec_('sh', '-c', 'echo "%s gpu3.lab" >> /etc/hosts' % host.address)
    try:
        run = rollout({'sglang_force_restart': True}, name='debian13-systemd', limit='gpu3', inventory=[str(named)])
    finally:
        # /etc/hosts is podman's bind mount: rewritten in place, not replaced.
        host.exec_('sh', '-c', 'grep -v " gpu3.lab$" /etc/hosts > /tmp/hosts; cat /tmp/hosts > /etc/hosts')
    assert run.rc == 0, run.stdout[-3000:]
    written = report('gpu3')
    assert written['status'] == 'redeployed' and written['healthy'] is True, written
    assert written['service_manager'] == 'systemd'
    # systemd, not a detached process, holds the new server: the unit is active and its main PID serves.
    unit = dict(line.split('=', 1) for line in host.exec_(
        'systemctl', 'show', 'sglang', '--property=ActiveState,MainPID').split())
    assert unit['ActiveState'] == 'active'
    assert int(unit['MainPID']) == host.server_pid() != before
    # Drained and readmitted under the router's spelling, which it still lists.
    assert written['router']['member_before'] is True
    assert written['router']['removed'] is True and written['router']['readmitted'] is True
    assert url(fleet, 'gpu3') in router_urls() and not any('gpu3.lab' in listed for listed in router_urls())


def test_a_canary_that_fails_stops_the_rollout_with_the_others_untouched(fleet, rollout, tmp_path):
    bad = tmp_path / 'for-another-version.diff'
    bad.write_text('--- a/sglang/srt/speculative/eagle_worker.py\n+++ b/sglang/srt/speculative/eagle_worker.py\n'
                   '@@ -1,2 +1,2 @@\n-import logging_v9\n+import logging_v10\n import time\n')
    canary_only = tmp_path / 'canary-only.yml'
    # Which code reads the dynamic-speculation variable is not at stake here (a patch for another version is).
    canary_only.write_text(json.dumps({'gpu': {'hosts': {'gpu1': {'sglang_patch_file': str(bad), 'sglang_dynamic_spec_env_read_by': 'installed'}}}}))
    before = pids(fleet)
    run = rollout({'sglang_force_restart': True, 'redeploy_canary': 1, 'redeploy_serial': 2}, name='canary',
                  inventory=[str(canary_only)])
    assert run.rc != 0
    assert 'applies neither forwards nor backwards' in ' '.join(run.failure_messages('gpu1'))
    assert report('gpu1')['status'] == 'failed' and 'nothing was stopped' in report('gpu1')['reason']
    # The canary failed: nothing else was stopped, every server still serves from the router.
    assert pids(fleet) == before
    assert router_urls() == sorted(url(fleet, name) for name in FLEET)
    for name in ('gpu2', 'gpu3'):
        assert run.count('changed', name) == 0


def test_a_failed_host_stops_the_next_batches_past_the_failure_budget(fleet, rollout, tmp_path):
    bad = tmp_path / 'for-another-version.diff'
    bad.write_text('--- a/sglang/version.py\n+++ b/sglang/version.py\n@@ -1 +1 @@\n-nothing like this\n+at all\n')
    first_batch = tmp_path / 'first-batch.yml'
    first_batch.write_text(json.dumps({'gpu': {'hosts': {'gpu1': {'sglang_patch_file': str(bad), 'sglang_dynamic_spec_env_read_by': 'installed'}}}}))
    before = pids(fleet)
    run = rollout({'sglang_force_restart': True, 'redeploy_serial': 2, 'redeploy_max_fail_percentage': 40},
                  name='budget', inventory=[str(first_batch)])
    assert run.rc != 0
    # gpu1 and gpu2 form the first batch: one of two failed (50 % > 40 %), so gpu3 is left alone.
    assert report('gpu2')['status'] == 'redeployed'
    skipped = report('gpu3')
    assert skipped['status'] == 'skipped'
    assert skipped['reason'].startswith('rollout stopped: 1 of 2 finished host(s) failed (gpu1)')
    now = pids(fleet)
    assert now['gpu1'] == before['gpu1'] and now['gpu3'] == before['gpu3'] and now['gpu2'] != before['gpu2']
    assert router_urls() == sorted(url(fleet, name) for name in FLEET)


def test_a_host_marked_skip_is_left_alone_and_reported(fleet, rollout, tmp_path):
    marked = tmp_path / 'skip.yml'
    marked.write_text(json.dumps({'gpu': {'hosts': {'gpu2': {'sglang_redeploy_skip': True}}}}))
    before = pids(fleet)
    run = rollout({'sglang_force_restart': True}, name='skip', limit='gpu2', inventory=[str(marked)])
    assert run.rc == 0, run.stdout[-3000:]
    assert report('gpu2')['status'] == 'skipped'
    assert report('gpu2')['reason'] == 'sglang_redeploy_skip is set for this host'
    assert pids(fleet)['gpu2'] == before['gpu2']


def test_a_server_already_down_counts_against_max_unavailable(fleet, rollout):
    before = pids(fleet)
    fleet['gpu3'].exec_('systemctl', 'stop', 'sglang')
    try:
        # Limited to gpu1, the run still counts the whole group's servers.
        run = rollout({'sglang_force_restart': True, 'redeploy_max_unavailable': 1, 'sglang_fleet_wait_timeout': 2},
                      name='budget', limit='gpu1')
        assert run.rc != 0
        written = report('gpu1')
        assert written['status'] == 'failed', written
        assert 'more than max_unavailable 1: gpu3 (/health answered nothing); waited 2.0s' in written['reason']
        assert written['reason'].startswith('nothing was stopped')
        assert fleet['gpu1'].server_pid() == before['gpu1'] and fleet['gpu1'].healthy()
        # With room for two, the same run goes ahead.
        room = rollout({'sglang_force_restart': True, 'redeploy_max_unavailable': 2}, name='room', limit='gpu1')
        assert room.rc == 0, room.stdout[-3000:]
        assert report('gpu1')['fleet_slot']['unavailable'] == [{'host': 'gpu3', 'why': '/health answered nothing'}]
    finally:
        fleet['gpu3'].exec_('systemctl', 'start', 'sglang')
        wait_for(fleet['gpu3'].healthy, 60, 'gpu3 serving again')


def test_a_server_out_of_the_router_before_the_run_stays_out(fleet, rollout):
    worker = [w for w in http_json('GET', ROUTER + '/workers')['workers'] if w['url'] == url(fleet, 'gpu2')][0]
    http_json('DELETE', ROUTER + '/workers/' + worker['id'])
    wait_for(lambda: url(fleet, 'gpu2') not in router_urls(), 30, 'gpu2 out of the router')
    try:
        before = fleet['gpu2'].server_pid()
        run = rollout({'sglang_force_restart': True}, name='pre-drained', limit='gpu2')
        assert run.rc == 0, run.stdout[-3000:]
        written = report('gpu2')
        assert written['status'] == 'redeployed' and fleet['gpu2'].server_pid() != before
        assert written['router']['member_before'] is False and written['router']['removed'] is False
        assert written['router']['readmitted'] is False and written['router']['member'] is False
        assert url(fleet, 'gpu2') not in router_urls()
    finally:
        http_json('POST', ROUTER + '/workers', {'url': url(fleet, 'gpu2')})
        wait_for(lambda: url(fleet, 'gpu2') in router_urls(), 30, 'gpu2 back in the router')


def test_a_server_a_restore_left_out_of_the_router_goes_back_in_with_the_next_run(fleet, rollout):
    # Issue 47 (make matrix): the state a restore leaves when the router would not take the server back (the
    # guard's record of it, as tests/integration/test_sglang_guard.py shows the real guard writing it) used to
    # read as "drained by an operator" to every later run. Here the next run, with nothing else to change,
    # redeploys gpu2 to verify it and puts it back.
    worker = [w for w in http_json('GET', ROUTER + '/workers')['workers'] if w['url'] == url(fleet, 'gpu2')][0]
    http_json('DELETE', ROUTER + '/workers/' + worker['id'])
    wait_for(lambda: url(fleet, 'gpu2') not in router_urls(), 30, 'gpu2 out of the router')
    owed = {'router_url': ROUTER, 'worker_url': url(fleet, 'gpu2'), 'run_id': 'gpu2-earlier', 'at': 1.0,
            'why': 'the router did not admit it'}
    record = '/var/lib/gpuops-sglang/sglang/router_owed.json'
    fleet['gpu2'].exec_('python3', '-c', 'import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600); '
                        'os.write(fd, sys.argv[2].encode())', record, json.dumps(owed))
    try:
        run = rollout(name='owed', limit='gpu2')
        assert run.rc == 0, run.stdout[-3000:]
        written = report('gpu2')
        assert written['status'] == 'redeployed', written
        assert written['reasons'] == ['left out of the router by the restore of run gpu2-earlier']
        assert written['router']['readmitted'] is True and written['router']['member'] is True
        assert url(fleet, 'gpu2') in router_urls()
        assert fleet['gpu2'].exec_('ls', '/var/lib/gpuops-sglang/sglang').split().count('router_owed.json') == 0
    finally:
        fleet['gpu2'].exec_('rm', '-f', record)
        if url(fleet, 'gpu2') not in router_urls():
            http_json('POST', ROUTER + '/workers', {'url': url(fleet, 'gpu2')})
            wait_for(lambda: url(fleet, 'gpu2') in router_urls(), 30, 'gpu2 back in the router')


def test_a_drain_past_its_deadline_is_reported(fleet, rollout):
    host = fleet['gpu1']
    host.exec_('sh', '-c', 'echo %d > %s' % (host.server_pid(), GENERATE_GATE))
    answers = []
    client = threading.Thread(target=lambda: answers.append(
        subprocess.run(['curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', '-X', 'POST', '-H',
                        'Content-Type: application/json', '-d', '{"text": "held"}', url(fleet, 'gpu1') + '/generate'],
                       stdout=subprocess.PIPE, universal_newlines=True).stdout))
    try:
        client.start()
        wait_for(lambda: in_flight(fleet, 'gpu1') == 1, 30, 'a request held in flight on gpu1')
        run = rollout({'sglang_force_restart': True, 'sglang_drain_timeout': 1}, name='drain-deadline', limit='gpu1')
    finally:
        host.exec_('rm', '-f', GENERATE_GATE)
        client.join(60)
    assert run.rc == 0, run.stdout[-3000:]
    written = report('gpu1')
    assert written['status'] == 'redeployed'
    assert written['router']['drain']['idle'] is False and written['router']['drain']['in_flight_at_end'] == 1
    assert 'stopped with requests possibly in flight: 1 request(s) still in flight after 1.0s' in written['reason']
    assert url(fleet, 'gpu1') in router_urls()
