"""The performance gate (sglang_perf_gate) on the lab: the stand-in decodes like a batched server, and
LAB_STANDIN_SLOWDOWN (from the server's environment) makes a deliberately slower one.

Two runs: a redeploy with nothing slower passes and reports both tables; a slower new launch configuration on
the canary is rolled back (the previous server serves, read from outside), its report names the regressed
level, and the rollout stops with the other host untouched. The lab's servers run without --enable-metrics
(measured from outside alone: metrics null); the slower candidate runs with it. Outcomes only, never timings.
The lab shares two cores with the rest of the suite, and a benchmark of about a second per level there moved
p95 inter-token latency by +40% between two equal servers (a CI run of 2026-12-03): these tests run the gate
with wide tolerances (50% throughput, 100% latency) and a factor of 5 on every decode step (-80% throughput,
+400% latency), far beyond them either way. The tolerances' arithmetic is unit-tested (test_performance.py).
"""
import json
import os
import re
import urllib.request

from helpers import lab_instance

GPU_HOSTS = ('gpu1', 'gpu2')
# Small and bounded: levels 1 and 16 (twice the lab's threshold of 8), 16 requests each. The lab's window budget
# (80 s) plus two benchmarks of two levels.
GATE = {'sglang_perf_gate': True, 'sglang_perf_requests': 16, 'sglang_perf_max_new_tokens': 16,
        'sglang_perf_timeout': 30, 'sglang_rollback_deadline': 80 + 2 * 2 * 30,
        'sglang_perf_throughput_tolerance': 0.5, 'sglang_perf_itl_tolerance': 1.0}
FIGURES = {'output_tok_s', 'ttft_p95_s', 'itl_p95_s', 'errors'}


def last_report(name):
    with open(os.path.join(lab_instance.reports_dir(), name + '.json')) as handle:
        return json.load(handle)


def generates(host):
    request = urllib.request.Request(lab_instance.server_url(host) + '/generate',
                                     headers={'Content-Type': 'application/json'},
                                     data=json.dumps({'text': 'x', 'sampling_params': {'max_new_tokens': 2}}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status == 200


def artifacts(run):
    stats = next(event['event_data'] for event in run.events if event['event'] == 'playbook_on_stats')
    return stats['artifact_data']['sglang_redeploy']


def test_a_redeploy_that_serves_as_fast_passes_the_gate_and_reports_both_tables(lab, redeploy):
    run = redeploy(dict(GATE, sglang_force_restart=True), name='gate-pass')
    assert run.rc == 0, run.stdout[-3000:]
    published = artifacts(run)
    for name in GPU_HOSTS:
        report = last_report(name)
        assert report['status'] == 'redeployed' and report['healthy'] is True
        performance = report['performance']
        assert performance['verdict'] == 'pass', performance['reason']
        assert performance['reason'].startswith('within the tolerances')
        assert [row['concurrency'] for row in performance['levels']] == [1, 16]
        for row in performance['levels']:
            assert set(row['before']) == FIGURES and set(row['after']) == FIGURES
            assert row['before']['errors'] == 0 and row['after']['errors'] == 0
            assert row['before']['output_tok_s'] > 0 and row['after']['output_tok_s'] > 0
        # Without --enable-metrics the servers export no /metrics: measured from outside alone.
        assert performance['metrics'] == {'before': None, 'after': None}
        assert published[name]['performance'] == performance
        assert lab[name].healthy()


def test_a_slower_canary_is_rolled_back_and_stops_the_rollout(lab, redeploy):
    untouched, untouched_report = lab['gpu2'].server_pid(), last_report('gpu2')
    run = redeploy(dict(GATE, redeploy_canary=1, redeploy_serial=1, sglang_extra_args=['--enable-metrics'],
                        sglang_environment={'LAB_STANDIN_SLOWDOWN': '5'}), name='gate-slower')
    assert run.rc != 0
    canary = last_report('gpu1')
    assert canary['status'] == 'rolled_back' and canary['healthy'] is True
    performance = canary['performance']
    assert performance['verdict'] == 'fail'
    assert re.search(r'concurrency 16: output tok/s [0-9.]+ -> [0-9.]+ \(-[0-9.]+%, tolerance 50%\)',
                     performance['reason']), performance['reason']
    assert 'the new server serves slower than the old one: concurrency ' in canary['reason']
    assert 'the previous server serves again' in canary['reason']
    # The candidate ran with --enable-metrics (its own gauges), the old server without (none).
    assert performance['metrics']['before'] is None and performance['metrics']['after'] is not None
    # From outside: the previous server serves (it generates), with its own launch configuration back.
    assert lab['gpu1'].healthy()
    assert generates('gpu1')
    assert 'LAB_STANDIN_SLOWDOWN' not in lab['gpu1'].exec_('cat', '/etc/sglang/launch.json')
    assert '--enable-metrics' not in lab['gpu1'].exec_('cat', '/etc/sglang/launch.json')
    # The canary failed its gate: the rollout stopped there (the canary batch failed as a whole, so Ansible
    # ends the play), and the other host was never touched, not even its report.
    assert lab['gpu2'].server_pid() == untouched and run.count('changed', 'gpu2') == 0
    assert last_report('gpu2') == untouched_report
