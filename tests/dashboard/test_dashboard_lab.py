"""The dashboard's API against the embedded lab: a redeploy followed over server-sent events to its
per-host summary, a host refused by its preflight (a patch that does not apply), and a cancel inside
the outage window after which the host's guard brings the previous server back.

The lab is shared: run under `flock /tmp/gpuops-lab.lock`. The fixture brings it up and leaves it serving.
"""
import json
import os
import subprocess
import time
import urllib.request

from gpuops_dashboard.app import Dashboard

from helpers.dashboard_http import get, post
from helpers.lab_strays import PODMAN_ENV
from helpers import lab_instance

GATE = '/run/lab-standin-drain-gate'
# The lab's short window: 1 (drain) + 2*2 (router) + 2*2 + 5 + 10 = 24 s, the guard acts 25 s after the
# window opened.
FAST_GUARD = {'sglang_rollback_deadline': 25, 'sglang_term_timeout': 2, 'sglang_gpu_release_timeout': 5,
              'sglang_health_timeout': 10, 'sglang_drain_timeout': 1, 'sglang_router_timeout': 2}
RUN_TIMEOUT_S = 300


def wait_for(predicate, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError('%s did not happen within %s s' % (what, timeout))


def finished(dashboard, run_id):
    return wait_for(lambda: (lambda run: run if run['status'] != 'running' else None)(
        get('%s/api/redeploys/%s' % (dashboard.url, run_id))), RUN_TIMEOUT_S, 'redeploy %s ending' % run_id, 0.5)


def server_events(url):
    """Read a server-sent event stream to its `end` event: [(event, data), ...]."""
    events, kind, data = [], None, []
    with urllib.request.urlopen(url, timeout=RUN_TIMEOUT_S) as stream:
        for raw in stream:
            line = raw.decode().rstrip('\n')
            if line.startswith('event: '):
                kind = line[7:]
            elif line.startswith('data: '):
                data.append(line[6:])
            elif line == '' and kind:
                events.append((kind, json.loads('\n'.join(data))))
                if kind == 'end':
                    return events
                kind, data = None, []
    raise AssertionError('the stream ended without an end event: %s' % events[-3:])


def healthy(host):
    try:
        with urllib.request.urlopen(lab_instance.server_url(host) + '/health', timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def podman_exec(host, *argv):
    subprocess.check_call(['podman', 'exec', lab_instance.container(host)] + list(argv), env=PODMAN_ENV)


def test_redeploy_streams_each_hosts_phases_and_ends_with_the_summary(dashboard, orphan_in_gpu1):
    hosts = dict((host['name'], host) for host in get(dashboard.url + '/api/hosts')['hosts'])
    assert set(hosts) == {'gpu1', 'gpu2'} and all(host['healthy'] for host in hosts.values())
    assert hosts['gpu1']['settings']['speculative_algorithm'] == 'EAGLE3'

    status, body, _ = post(dashboard.url + '/api/redeploys', dashboard.token,
                           {'extra_vars': {'sglang_force_restart': True}})
    assert status == 202, body
    run_id = body['id']
    # A second start while one runs is refused: two runs must never race on the same hosts.
    assert post(dashboard.url + '/api/redeploys', dashboard.token, {})[0] == 409

    events = server_events('%s/api/redeploys/%s/events' % (dashboard.url, run_id))
    assert events[-1] == ('end', {'status': 'successful'})
    for name in ('gpu1', 'gpu2'):
        seen = [data['phase'] for kind, data in events if kind == 'progress' and data.get('host') == name
                and data.get('state') == 'ok' and data.get('phase')]
        # The patch step shows only where the dry-run found the patch not applied yet (a fresh lab). A single-node
        # server's start releases its GPUs in its own module run unless the stop found strays (gpu1's orphan):
        # gpu2 has no gpu_release task of its own.
        released = ['gpu_release'] if name == 'gpu1' else []
        window = [phase for phase in ('arm', 'stop', 'gpu_release', 'patch', 'start', 'confirm') if phase in seen]
        assert window in (['arm', 'stop'] + released + ['start', 'confirm'],
                          ['arm', 'stop'] + released + ['patch', 'start', 'confirm']), seen
    # The orphan beside gpu1's server makes the container kill run, and it ends it.
    assert any(data.get('phase') == 'kill' and data.get('host') == 'gpu1' and data.get('state') == 'ok'
               for _, data in events)

    run = finished(dashboard, run_id)
    assert run['status'] == 'successful'
    for name in ('gpu1', 'gpu2'):
        report = run['hosts'][name]
        assert (report['status'], report['healthy']) == ('redeployed', True)
        assert report['reason'].startswith('force_restart')
        assert report['downtime_s'] > 0 and report['phases_s']['start'] > 0
    assert [line for line in run['hosts']['gpu1']['killed_in_container'] if line.startswith(orphan_in_gpu1 + ' ')]
    svg = urllib.request.urlopen('%s/api/redeploys/%s/timeline.svg' % (dashboard.url, run_id), timeout=30).read()
    assert b'data-phase="gpu_release"' in svg and b'class="healthy"' in svg

    # The history is in SQLite: a new app on the same database (a restart) still has the run.
    again = Dashboard(lab_instance.inventory(), os.path.join(dashboard.state_dir, 'dashboard.sqlite3'),
                      os.path.join(dashboard.state_dir, 'runs'), 'other')
    assert again.describe(run_id)['hosts'] == run['hosts']
    again.store.close()


def test_patch_that_does_not_apply_fails_the_host_with_its_reason(serve, lab_serving, tmp_path):
    # A request may name only a patch inside the dashboard's patch folders: this one serves tmp_path's.
    dashboard = serve(patch_dirs=[str(tmp_path)])
    bad = tmp_path / 'for-another-version.diff'
    bad.write_text('--- a/sglang/srt/speculative/eagle_worker.py\n+++ b/sglang/srt/speculative/eagle_worker.py\n'
                   '@@ -1,2 +1,2 @@\n-import logging_v9\n+import logging_v10\n import time\n')
    pid = get(dashboard.url + '/api/hosts')['hosts'][1]['pid']
    status, body, _ = post(dashboard.url + '/api/redeploys', dashboard.token,
                           # Dynamic speculation off: a patch that reads no variable is not refused for that (issue 43).
                           {'limit': 'gpu2', 'extra_vars': {'sglang_patch_file': str(bad),
                                                            'sglang_dynamic_spec_enabled': False}})
    assert status == 202, body
    run = finished(dashboard, body['id'])
    assert run['status'] == 'failed'
    assert list(run['hosts']) == ['gpu2']
    report = run['hosts']['gpu2']
    assert report['status'] == 'failed' and report['healthy'] is True
    assert report['reason'].startswith('nothing was stopped: ')
    assert 'applies neither forwards nor backwards' in report['reason']
    gpu2 = get(dashboard.url + '/api/hosts')['hosts'][1]
    assert gpu2['name'] == 'gpu2' and gpu2['healthy'] and gpu2['pid'] == pid


def test_cancel_inside_the_window_then_the_guard_brings_the_previous_server_back(dashboard):
    before = get(dashboard.url + '/api/hosts')['hosts'][1]
    assert before['name'] == 'gpu2' and before['healthy']
    # The stand-in's drain gate holds the stop, as requests in flight would: the cancel lands in the window.
    podman_exec('gpu2', 'touch', GATE)
    try:
        status, body, _ = post(dashboard.url + '/api/redeploys', dashboard.token,
                               {'limit': 'gpu2', 'extra_vars': dict(FAST_GUARD, sglang_max_running_requests=96)})
        assert status == 202, body
        run_id = body['id']
        wait_for(lambda: get('%s/api/redeploys/%s' % (dashboard.url, run_id))['progress'].get('gpu2', {})
                 .get('phase') == 'stop', 120, 'gpu2 stopping')
        wait_for(lambda: not healthy('gpu2'), 60, 'gpu2 draining')
        status, notice, _ = post('%s/api/redeploys/%s/cancel' % (dashboard.url, run_id), dashboard.token)
        assert status == 200, notice
        assert notice['hosts']['gpu2']['stage'] == 'in_window'
        assert '25 s after the window opened' in notice['hosts']['gpu2']['expect']
        run = finished(dashboard, run_id)
    finally:
        podman_exec('gpu2', 'rm', '-f', GATE)
    assert run['status'] == 'canceled'
    assert run['cancel']['hosts']['gpu2']['stage'] == 'in_window'
    # No artifacts after a cancel: the summary is the host's report file, which says the run was cut.
    assert 'the run stopped inside the outage window' in run['hosts']['gpu2']['reason']
    # The guard on the host acts at its deadline (25 s after the window opened) and the old server serves.
    wait_for(lambda: healthy('gpu2'), 25 + 10 + 30, 'gpu2 serving again through its guard')
    after = get(dashboard.url + '/api/hosts')['hosts'][1]
    assert after['healthy'] and after['settings']['max_running_requests'] == before['settings']['max_running_requests']
