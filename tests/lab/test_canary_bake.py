"""The canary bake (sglang_canary_bake) on the lab: gpu1 is the canary, gpu2 the baseline, both behind the lab's
router (smg), under a steady request stream the test sends through the router itself (bench/load.py).

Every server exports SGLang's live histograms and counters (the stand-in's /metrics, lab/standin/sglang_standin/
live_metrics.py) from the module fixture's redeploy on. A canary that passes its bake keeps the new version and
the rollout completes; one that degrades only once it serves (LAB_STANDIN_DEGRADE_AFTER: 20 s after it turned
healthy, so its start, verification, performance gate and readmission see a healthy server, and the gate passes it) or that errors (LAB_STANDIN_ERROR_RATE)
is rolled back by its guard: out of the router, its requests finished, the previous server started and readmitted,
gpu2 untouched. Outcomes only: a factor of 5 on every decode step and a fifth of requests failing are far beyond
the tolerances, and canary and baseline share the machine over the same window.
"""
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from helpers import lab_instance
from helpers.ansible_run import REPO, run_playbook
from helpers.simulated import wait_for

ROUTER = lab_instance.router_url()
LOAD = os.path.join(REPO, 'bench', 'load.py')
HOSTS = ('gpu1', 'gpu2')
# The guard's deadline is the lab's `auto`: the plan's window budget, bake (and gate) included.
BAKE = {'sglang_canary_bake': 25, 'redeploy_canary': 1, 'redeploy_serial': 1}
# The performance gate beside the bake, with test_performance_gate.py's wide tolerances: it measures the new server
# before its readmission, within the first seconds after it turned healthy, so it passes a server that degrades
# only later (DEGRADE_AFTER below is past the gate's two levels of 16 short requests even on a busy machine).
GATE = {'sglang_perf_gate': True, 'sglang_perf_requests': 16, 'sglang_perf_max_new_tokens': 16,
        'sglang_perf_timeout': 30, 'sglang_perf_throughput_tolerance': 0.5, 'sglang_perf_itl_tolerance': 1.0}


def report(name):
    with open(os.path.join(lab_instance.reports_dir(), name + '.json')) as handle:
        return json.load(handle)


def router_urls():
    with urllib.request.urlopen(ROUTER + '/workers', timeout=10) as response:
        return sorted(worker['url'] for worker in json.load(response)['workers'])


def launch(lab, name):
    return json.loads(lab[name].exec_('cat', '/etc/sglang/launch.json'))


@pytest.fixture(scope='module')
def baked_lab(lab, tmp_path_factory):
    """Both servers exporting their live figures (a redeploy with sglang_enable_metrics), back as found after."""
    folder = tmp_path_factory.mktemp('bake')
    run = run_playbook(folder, 'playbooks/redeploy.yml', lab_instance.inventory(), {'sglang_enable_metrics': True},
                       name='metrics-on')
    assert run.rc == 0, run.stdout[-3000:]
    yield lab
    run = run_playbook(folder, 'playbooks/redeploy.yml', lab_instance.inventory(), name='metrics-off')
    assert run.rc == 0, run.stdout[-3000:]


@pytest.fixture
def load(tmp_path):
    """A steady stream through the router for the test's run: its figures once stopped."""
    stop_file = tmp_path / 'stop-load'
    process = subprocess.Popen(
        [sys.executable, LOAD, '--url', ROUTER, '--rate', '8', '--concurrency', '4', '--max-duration', '400',
         '--stop-file', str(stop_file), '--health-timeout', '5']
        + ['--health=%s/health' % lab_instance.server_url(name) for name in HOSTS],
        stdout=subprocess.PIPE, universal_newlines=True)

    def stop():
        stop_file.write_text('')
        return json.loads(process.communicate(timeout=120)[0].strip().splitlines()[-1])
    try:
        yield stop
    finally:
        if process.poll() is None:
            stop_file.write_text('')
            process.communicate(timeout=120)


def redeploy(tmp_path, extravars, name, limit=None):
    return run_playbook(tmp_path, 'playbooks/redeploy.yml', lab_instance.inventory(), dict(BAKE, **extravars),
                        name=name, limit=limit)


def test_a_healthy_canary_passes_its_bake_and_the_rollout_completes(baked_lab, load, tmp_path):
    before = dict((name, baked_lab[name].server_pid()) for name in HOSTS)
    run = redeploy(tmp_path, {'sglang_force_restart': True}, 'bake-pass')
    measured = load()
    assert run.rc == 0, run.stdout[-3000:]
    canary = report('gpu1')
    assert canary['status'] == 'redeployed' and canary['bake']['verdict'] == 'pass', canary['bake']
    assert canary['bake']['action'] == 'kept' and canary['bake']['baseline_servers'] == 1
    assert canary['bake']['canary']['requests'] >= 20 and canary['bake']['baseline']['requests'] >= 20
    # Only the canary bakes; the rollout went on to gpu2.
    assert report('gpu2')['status'] == 'redeployed' and report('gpu2')['bake'] is None
    assert all(baked_lab[name].server_pid() != before[name] for name in HOSTS)
    assert measured['requests_total'] > 0 and measured['requests_failed'] == 0, measured
    assert router_urls() == sorted(lab_instance.server_url(name) for name in HOSTS)


@pytest.mark.parametrize('environment, gate, problem', [
    ({'LAB_STANDIN_SLOWDOWN': '5', 'LAB_STANDIN_DEGRADE_AFTER': '20'}, GATE, 'p95 inter-token latency'),
    ({'LAB_STANDIN_ERROR_RATE': '0.2'}, {}, ' requests against 0.0% of '),
], ids=['degrades-under-traffic', 'errors'])
def test_a_worse_canary_is_rolled_back_by_its_bake_with_the_other_host_untouched(baked_lab, load, tmp_path,
                                                                                environment, gate, problem):
    untouched, untouched_report = baked_lab['gpu2'].server_pid(), report('gpu2')
    run = redeploy(tmp_path, dict(gate, sglang_environment=environment), 'bake-worse')
    measured = load()
    assert run.rc != 0
    canary = report('gpu1')
    assert canary['status'] == 'rolled_back' and canary['healthy'] is True, (canary['status'], canary['reason'])
    if gate:
        # The gate alone would have kept this canary: it was fast for its first seconds, then slowed under traffic.
        assert canary['performance']['verdict'] == 'pass', canary['performance']['reason']
    assert canary['bake']['verdict'] == 'fail' and canary['bake']['action'] == 'rolled_back'
    assert problem in canary['bake']['reason'], canary['bake']['reason']
    assert 'the canary failed its bake' in canary['reason'] and 'back in the router' in canary['reason']
    # The previous server serves again, in the router, with its own configuration.
    wait_for(lambda: baked_lab['gpu1'].healthy(), 30, 'gpu1 healthy')
    assert not set(environment) & set(launch(baked_lab, 'gpu1').get('environment') or {})
    assert router_urls() == sorted(lab_instance.server_url(name) for name in HOSTS)
    # The rollout stopped at the canary: gpu2 was never touched, not even its report.
    assert baked_lab['gpu2'].server_pid() == untouched and run.count('changed', 'gpu2') == 0
    assert report('gpu2') == untouched_report
    if 'LAB_STANDIN_ERROR_RATE' not in environment:
        # A canary that only got slower lost no client request: out of the router and drained before its stop.
        assert measured['requests_total'] > 0 and measured['requests_failed'] == 0, measured


def test_a_canary_with_no_other_server_is_compared_with_its_own_old_server(baked_lab, load, tmp_path):
    # A fleet of one: gpu1 alone (gpu2 is no server of this fleet), so its old server is held and read first.
    run = redeploy(tmp_path, {'sglang_force_restart': True, 'sglang_fleet_hosts': ['gpu1']}, 'bake-alone',
                   limit='gpu1')
    measured = load()
    assert run.rc == 0, run.stdout[-3000:]
    bake = report('gpu1')['bake']
    assert bake['verdict'] == 'pass' and bake['baseline_source'] == 'before', bake
    assert bake['baseline']['requests'] >= 20 and bake['canary']['requests'] >= 20
    assert measured['requests_failed'] == 0, measured
