"""The dashboard's pure parts and its API without the lab: phases from the role's tags (on a recorded run and on
ansible-runner's own events), the timeline picture, the advice after a cancel, SQLite history across a restart,
and the token."""
import json
import os
import re
import shutil
import sys
import urllib.error
import urllib.request

import ansible_runner
import pytest

from gpuops_dashboard import inventory, performance, phases, redeploy, speculation, store, timeline
from helpers import recorded_run as recorded
from helpers.dashboard_http import post

REPO = redeploy.REPO
recorded_run = recorded.records


def test_every_phase_tag_in_the_role_names_one_known_phase():
    tagged = [(task_path, task.phases) for task_path, task in recorded.role_tasks() if task.phases]
    assert len(tagged) >= 20, 'the walk found too few tagged tasks: %s' % tagged
    wrong = [(task_path, named) for task_path, named in tagged if len(named) > 1 or named[0] not in phases.PHASES]
    assert not wrong, 'tasks whose gpuops_phase_* tags name no phase or several (known: %s): %s' % (
        ', '.join(phases.PHASES), wrong)


def test_every_phase_is_marked_by_a_task_of_the_role():
    marked = set(phase for _, task in recorded.role_tasks() for phase in task.phases)
    assert marked == set(phases.PHASES)


# The role's steps that refuse a host before anything moves (an assert, or the plan's and the decision's checks).
REFUSING = {'ansible.builtin.assert', 'gpuops.sglang.sglang_plan', 'gpuops.sglang.sglang_decision'}


def test_every_check_that_refuses_a_host_has_a_phase():
    # The page shows a failure under its phase: a refusal by a check without one would show nothing.
    refusing = [(task_path, task) for task_path, task in recorded.role_tasks() if REFUSING & task.keywords]
    assert len(refusing) >= 2, 'the walk found too few refusing tasks: %s' % refusing
    untagged = [(task_path, task.name) for task_path, task in refusing if len(task.phases) != 1]
    assert not untagged, 'refusing tasks the dashboard cannot place (no gpuops_phase_* tag): %s' % untagged


def test_the_recorded_run_points_at_tasks_of_its_titles():
    here = dict(recorded.role_tasks())
    stale = sorted(set((record['task'], record['task_path']) for record in recorded_run() if record.get('task_path')
                       and getattr(here.get(record['task_path']), 'name', None) != record['task']))
    assert not stale, ('the role moved these tasks: point the recorded run at their new places with '
                       '`.venv/bin/python tests/helpers/recorded_run.py`: %s' % stale)


def copy_of_the_role(tmp_path):
    collection = tmp_path / 'collection'
    shutil.copytree(os.path.join(REPO, 'roles', 'sglang'), str(collection / 'roles' / 'sglang'))
    return collection


def test_a_renamed_task_keeps_its_phase(tmp_path):
    collection = copy_of_the_role(tmp_path)
    stop_file = collection / 'roles' / 'sglang' / 'tasks' / 'stop.yml'
    title = 'Stop the server gracefully (the outage starts here)'
    stop_path = recorded.task_path_of(title, str(collection))
    assert phases.TaskPhases(str(collection))(stop_path) == 'stop'
    stop_file.write_text(stop_file.read_text().replace(title, 'Ask the server to stop'))
    assert dict(recorded.role_tasks(str(collection)))[stop_path].name == 'Ask the server to stop'
    # The same place, read again (the file changed), and through a link as ansible-playbook reads this checkout.
    link = tmp_path / 'collections' / 'ansible_collections' / 'gpuops' / 'sglang'
    link.parent.mkdir(parents=True)
    link.symlink_to(collection)
    resolve = phases.TaskPhases(str(collection))
    assert resolve(str(link / stop_path)) == 'stop'
    record = phases.progress_record({'event': 'runner_on_ok', 'counter': 3, 'created': '2026-11-30T12:00:00',
                                     'event_data': {'host': 'gpu1', 'task': 'Ask the server to stop',
                                                    'task_path': str(link / stop_path), 'res': {'changed': True}}},
                                    phase_at=resolve)
    assert (record['task'], record['phase']) == ('Ask the server to stop', 'stop')


def test_an_edited_tag_is_read_again(tmp_path):
    collection = copy_of_the_role(tmp_path)
    resolve = phases.TaskPhases(str(collection))
    patch_path = recorded.task_path_of('Apply the patch', str(collection))
    assert resolve(patch_path) == 'patch'
    patch_file = collection / patch_path.rpartition(':')[0]
    patch_file.write_text(patch_file.read_text().replace('gpuops_phase_patch', 'gpuops_phase_start'))
    os.utime(str(patch_file), ns=(1, 1))
    assert resolve(patch_path) == 'start'
    patch_file.write_text(patch_file.read_text().replace('gpuops_phase_start', 'gpuops_phase_nothing'))
    os.utime(str(patch_file), ns=(2, 2))
    assert resolve(patch_path) is None


TAGGED = """---
- name: A step
  ansible.builtin.debug:
  tags: [gpuops_phase_stop]
"""


def test_only_the_roles_task_and_handler_files_are_read(tmp_path):
    collection = copy_of_the_role(tmp_path)
    outside = tmp_path / 'outside.yml'
    outside.write_text(TAGGED)
    for folder in ('roles/sglang/tasks', 'roles/sglang/handlers', 'roles/sglang/templates', 'playbooks'):
        (collection / folder).mkdir(parents=True, exist_ok=True)
        (collection / folder / 'tagged.yml').write_text(TAGGED)
    (collection / 'roles/sglang/tasks/tagged.txt').write_text(TAGGED)
    (collection / 'roles/sglang/tasks/linked.yml').symlink_to(outside)
    resolve = phases.TaskPhases(str(collection))
    assert resolve('roles/sglang/tasks/tagged.yml:2') == 'stop'
    assert resolve(str(collection / 'roles/sglang/handlers/tagged.yml') + ':2') == 'stop'
    for elsewhere in ('roles/sglang/templates/tagged.yml:2', 'playbooks/tagged.yml:2',
                      'roles/sglang/tasks/tagged.txt:2', 'roles/sglang/tasks/linked.yml:2',
                      'roles/sglang/tasks/../../../playbooks/tagged.yml:2', str(outside) + ':2',
                      'roles/sglang/tasks/tagged.yml:3', 'roles/sglang/tasks/tagged.yml',
                      'roles/sglang/tasks/missing.yml:2', '', None):
        assert resolve(elsewhere) is None, elsewhere


@pytest.mark.parametrize('tags, named', [
    (['gpuops_phase_stop'], ['stop']), ('gpuops_phase_stop, other', ['stop']), ('other', []), (None, []),
    (['gpuops_phase_stop', 'gpuops_phase_kill'], ['stop', 'kill']), (['{{ computed }}', 3], [])])
def test_phase_tags_in_the_forms_ansible_takes(tags, named):
    assert phases.phase_tags(tags) == named


ROLE = {
    'tasks/main.yml': """---
- name: Not a phase
  ansible.builtin.debug:
    msg: before
- name: Redeploy, or roll back
  block:
    - name: Stop it
      ansible.builtin.debug:
        msg: stop
      changed_when: true
      notify: Start it
      tags: [gpuops_phase_stop]
    - name: Patch it
      ansible.builtin.include_tasks: patch.yml
      tags: [gpuops_phase_patch]
  rescue:
    - name: Roll back
      ansible.builtin.debug:
        msg: never
      tags: [gpuops_phase_rollback]
""",
    'tasks/patch.yml': """---
- name: Apply it
  ansible.builtin.debug:
    msg: patch
  tags: [gpuops_phase_patch]
""",
    'handlers/main.yml': """---
- name: Start it
  ansible.builtin.debug:
    msg: start
  tags: [gpuops_phase_start]
""",
}


def test_ansible_runner_events_resolve_to_the_tags_of_their_tasks(tmp_path):
    # A real ansible-playbook run of a small role: the task_path in its events (a task in a block, an include,
    # the task it includes, a handler; read through a collection link as the dashboard's runs read this checkout)
    # names the line whose tags TaskPhases reads.
    collection = tmp_path / 'collection'
    for name, text in ROLE.items():
        (collection / 'roles' / 'sglang' / name).parent.mkdir(parents=True, exist_ok=True)
        (collection / 'roles' / 'sglang' / name).write_text(text)
    link = tmp_path / 'collections' / 'ansible_collections' / 'gpuops' / 'sglang'
    link.parent.mkdir(parents=True)
    link.symlink_to(collection)
    (tmp_path / 'play.yml').write_text('- hosts: localhost\n  gather_facts: false\n  roles: [gpuops.sglang.sglang]\n')
    (tmp_path / 'hosts').write_text('localhost ansible_connection=local ansible_python_interpreter=%s\n'
                                    % sys.executable)
    (tmp_path / 'runner').mkdir()
    events = []
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / 'runner'), playbook=str(tmp_path / 'play.yml'),
        inventory=str(tmp_path / 'hosts'), quiet=True, event_handler=lambda event: events.append(event) or True,
        envvars={'ANSIBLE_COLLECTIONS_PATH': str(tmp_path / 'collections'), 'ANSIBLE_FORCE_COLOR': '0',
                 'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '/usr/bin:/bin')})
    assert runner.status == 'successful', runner.stdout.read()[-3000:]
    resolve = phases.TaskPhases(str(collection))
    records = [phases.progress_record(event, phase_at=resolve) for event in events]
    done = [(record['task'], record['phase']) for record in records if record and record['state'] == 'ok']
    assert done == [('Not a phase', None), ('Stop it', 'stop'), ('Patch it', 'patch'), ('Apply it', 'patch'),
                    ('Start it', 'start')]


def test_phases_of_a_real_redeploy_in_order_without_skipped_steps():
    seen = phases.host_phases(recorded_run())
    order = [phase['phase'] for phase in seen['gpu2']]
    # gpu2 is bare metal: the container kill and the unchanged configuration were skipped.
    assert order == ['preflight', 'prepare', 'arm', 'stop', 'gpu_release', 'patch', 'start', 'confirm', 'report']
    assert all(phase['state'] == 'ok' and phase['end'] >= phase['start'] for phase in seen['gpu2'])


def test_current_phase_follows_the_run():
    records = recorded_run()
    stop_started = next(index for index, record in enumerate(records)
                        if record.get('phase') == 'stop' and record['state'] == 'started')
    assert phases.current_phase(records[:stop_started + 1])['gpu2']['phase'] == 'stop'
    assert phases.current_phase(records[:stop_started + 1])['gpu2']['state'] == 'running'
    assert phases.current_phase(records)['gpu2']['phase'] == 'report'


def test_failed_task_record_keeps_its_message():
    record = phases.progress_record({
        'event': 'runner_on_failed', 'counter': 7, 'created': '2026-11-30T12:00:00.000000',
        'event_data': {'host': 'gpu1', 'task': 'Apply the patch', 'task_path': recorded.task_path_of('Apply the patch'),
                       'res': {'msg': 'hunk 1 FAILED', 'changed': False}}})
    assert (record['phase'], record['state'], record['msg']) == ('patch', 'failed', 'hunk 1 FAILED')


def test_retry_of_a_long_wait_counts_attempts():
    record = phases.progress_record({
        'event': 'runner_retry', 'counter': 9, 'created': '2026-11-30T12:00:01.000000',
        'event_data': {'host': 'gpu2', 'task': 'Release the GPUs and prove their memory is free', 'retries': 30,
                       'task_path': recorded.task_path_of('Release the GPUs and prove their memory is free'),
                       'res': {'attempts': 3, 'changed': False}}})
    assert (record['phase'], record['state'], record['attempts'], record['retries']) == ('gpu_release', 'retry', 3, 30)
    started = dict(record, seq=8, state='started', attempts=None)
    assert phases.current_phase([started, record])['gpu2']['attempts'] == 3


def test_timeline_draws_each_phase_the_outage_and_health():
    records = recorded_run()
    hosts = records[-1]['artifacts']['sglang_redeploy']
    svg = timeline.render(records, hosts, title='redeploy <1>')
    drawn = re.findall(r'class="phase" data-phase="(\w+)"', svg)
    assert drawn == ['preflight', 'prepare', 'arm', 'stop', 'gpu_release', 'patch', 'start', 'confirm', 'report']
    assert 'outage %s s (host clock)' % hosts['gpu2']['downtime_s'] in svg
    assert 'class="healthy"' in svg and 'redeployed' in svg
    assert 'redeploy &lt;1&gt;' in svg
    # The host's own measurement of the GPU release is in that bar's tooltip.
    assert '%s s on the host' % hosts['gpu2']['phases_s']['gpu_release'] in svg


@pytest.mark.parametrize('status', ['redeployed', 'undone', 'unchanged', 'skipped', 'rolled_back', 'failed'])
def test_the_timeline_colours_every_status_a_report_has_and_an_undo_as_a_success(status):
    svg = timeline.render([], {'gpu2': {'status': status}})
    assert 'fill="%s">%s</text>' % (timeline.STATUS_COLOURS[status], status) in svg
    assert timeline.STATUS_COLOURS['undone'] == timeline.STATUS_COLOURS['redeployed']


@pytest.mark.parametrize('cut_after, stage', [('preflight', 'before_window'), ('stop', 'in_window'),
                                              ('confirm', 'confirmed')])
def test_cancel_says_what_to_expect_from_how_far_the_host_got(cut_after, stage):
    records = recorded_run()
    last = max(index for index, record in enumerate(records) if record.get('phase') == cut_after)
    notice = redeploy.expectations_after_cancel(records[:last + 1], rollback_deadline_s=25, rollback_idle_s=20)
    assert notice['gpu2']['stage'] == stage
    if stage == 'in_window':
        assert ('restores the pre-run files and starts the previous server by itself, 20 s after the last step'
                ' renewed its lease, or at the latest 25 s after the window opened') in notice['gpu2']['expect']


def test_history_survives_a_restart_and_a_lost_run_is_marked_failed(tmp_path):
    path = str(tmp_path / 'dashboard.sqlite3')
    first = store.Store(path)
    first.add_run('done', 'inventory/lab', 'gpu2', {'sglang_force_restart': True}, 1.0)
    first.add_record('done', {'seq': 1, 'kind': 'play'})
    first.finish_run('done', 'successful', 2.0, {'gpu2': {'status': 'redeployed'}})
    first.add_run('lost', 'inventory/lab', None, {}, 3.0)
    first.close()
    second = store.Store(path)
    assert second.run('done')['hosts'] == {'gpu2': {'status': 'redeployed'}}
    assert second.records('done') == [{'seq': 1, 'kind': 'play'}]
    assert second.run('lost')['status'] == 'failed' and 'dashboard stopped' in second.run('lost')['error']
    assert [run['id'] for run in second.runs()] == ['lost', 'done']


def test_start_refuses_a_missing_inventory(tmp_path):
    with pytest.raises(ValueError, match='does not exist'):
        redeploy.start('inventory/none', runs_dir=str(tmp_path))


@pytest.mark.parametrize('token', [None, 'wrong-token', ''])
def test_requests_that_act_need_the_token(dashboard_offline, token):
    status, body, headers = post(dashboard_offline.url + '/api/redeploys', token, {'limit': 'gpu2'})
    assert status == 401 and headers['WWW-Authenticate'] == 'Bearer'
    status, _, _ = post(dashboard_offline.url + '/api/redeploys/any/cancel', token)
    assert status == 401
    # Nothing was started.
    with urllib.request.urlopen(dashboard_offline.url + '/api/redeploys', timeout=10) as response:
        assert json.load(response)['redeploys'] == []


def gate_block(verdict, reason, after_tok_s):
    return {'verdict': verdict, 'reason': reason, 'baseline': 'measure',
            'levels': [{'concurrency': level,
                        'before': {'output_tok_s': 40.0 * level, 'ttft_p95_s': 0.05, 'itl_p95_s': 0.025, 'errors': 0},
                        'after': {'output_tok_s': after_tok_s * level, 'ttft_p95_s': 0.05, 'itl_p95_s': 0.075,
                                  'errors': 0}} for level in (1, 16)],
            'metrics': {'before': None, 'after': None}, 'elapsed_s': {'before': 3.0, 'after': 6.0}}


GATED_RUN = {
    'gpu1': {'status': 'redeployed', 'performance': gate_block('pass', 'within the tolerances', 39.0)},
    'gpu2': {'status': 'rolled_back', 'performance': gate_block(
        'fail', 'concurrency 16: output tok/s 640.0 -> 208.0 (-67.5%, tolerance 15%) <&>', 13.0)},
    'gpu3': {'status': 'unchanged', 'performance': dict(gate_block('skipped', 'nothing was redeployed', 0), levels=[])},
}


def test_the_performance_chart_shows_before_and_after_per_measured_host():
    svg = performance.render(GATED_RUN, title='redeploy <2>')
    assert re.findall(r'class="host-performance" data-host="(\w+)" data-verdict="(\w+)"', svg) == [
        ('gpu1', 'pass'), ('gpu2', 'fail')]
    # A pair of bars per level and host, with the figures in their tooltips.
    assert svg.count('class="bar"') == 8
    assert 'concurrency 16 before: 640.0 output tok/s' in svg and 'concurrency 16 after: 208.0 output tok/s' in svg
    assert 'ITL p95 25/75 ms' in svg
    # Every text escaped.
    assert '&lt;&amp;&gt;' in svg and 'redeploy &lt;2&gt;' in svg and '<&>' not in svg


BAKED_RUN = {
    'gpu5': {'status': 'rolled_back', 'bake': {
        'verdict': 'fail', 'action': 'rolled_back', 'reason': 'p95 inter-token latency 0.1200 s against 0.0250 s <&>',
        'canary': {'requests': 90, 'errors': 0, 'error_rate': 0.0, 'ttft_p95_s': 0.39, 'itl_p95_s': 0.12,
                   'e2e_p95_s': 1.9},
        'baseline': {'requests': 95, 'errors': 1, 'error_rate': 0.0105, 'ttft_p95_s': 0.38, 'itl_p95_s': 0.025,
                     'e2e_p95_s': 0.41}}},
    # An inconclusive bake without a baseline has nothing to draw against.
    'gpu6': {'status': 'redeployed', 'bake': {'verdict': 'inconclusive', 'canary': {'requests': 3}, 'baseline': None}},
}


def test_the_chart_draws_a_canary_against_its_baseline_beside_the_gate():
    svg = performance.render(dict(GATED_RUN, **BAKED_RUN), title='redeploy 3')
    assert re.findall(r'class="host-bake" data-host="(\w+)" data-verdict="(\w+)"', svg) == [('gpu5', 'fail')]
    assert len(re.findall(r'class="host-performance"', svg)) == 2
    # Three pairs of bars (TTFT, ITL, E2E), the figures in their tooltips, the requests of each side.
    assert 'p95 ITL, previous version: 0.025 s' in svg and 'p95 ITL, canary: 0.12 s' in svg
    assert 'requests: 95 previous version, 90 canary; errors 1 / 0' in svg
    assert '&lt;&amp;&gt;' in svg and '<&>' not in svg
    assert performance.render(BAKED_RUN).count('class="bar"') == 6


def test_no_chart_when_no_host_was_measured():
    assert performance.render({'gpu3': GATED_RUN['gpu3'], 'gpu4': {'status': 'failed'}, 'gpu6': BAKED_RUN['gpu6']}) == ''
    assert performance.render({}) == ''


def test_the_performance_chart_is_served_for_a_finished_run(serve):
    served = serve()
    stored = store.Store(os.path.join(served.state_dir, 'dashboard.sqlite3'))
    stored.add_run('gated', 'inventory/lab', None, {}, 1.0)
    stored.finish_run('gated', 'failed', 2.0, GATED_RUN)
    stored.add_run('plain', 'inventory/lab', None, {}, 3.0)
    stored.finish_run('plain', 'successful', 4.0, {'gpu3': GATED_RUN['gpu3']})
    stored.close()
    with urllib.request.urlopen(served.url + '/api/redeploys/gated/performance.svg', timeout=10) as response:
        assert response.status == 200 and response.headers['Content-Type'].startswith('image/svg+xml')
        assert 'data-host="gpu2" data-verdict="fail"' in response.read().decode()
    with urllib.request.urlopen(served.url + '/api/redeploys/plain/performance.svg', timeout=10) as response:
        assert response.status == 204


def test_a_finished_runs_description_lists_a_server_group_once(serve):
    served = serve()
    group = {'name': 'mn', 'nnodes': 2, 'outcome': 'redeployed', 'failed_nodes': []}
    stored = store.Store(os.path.join(served.state_dir, 'dashboard.sqlite3'))
    stored.add_run('grouped', 'inventory/lab', None, {}, 1.0)
    stored.finish_run('grouped', 'successful', 2.0, {
        'gpu1': {'status': 'unchanged', 'group': None},
        'mn1': {'status': 'redeployed', 'group': dict(group, rank=0)},
        'mn2': {'status': 'redeployed', 'group': dict(group, rank=1)}})
    stored.close()
    with urllib.request.urlopen(served.url + '/api/redeploys/grouped', timeout=10) as response:
        described = json.load(response)
    assert sorted(described['hosts']) == ['gpu1', 'mn1', 'mn2']
    assert [(server['host'], server['group'] and server['group']['name']) for server in described['servers']] == [
        ('gpu1', None), ('mn1', 'mn')]
    assert [(node['name'], node['rank']) for node in described['servers'][1]['group']['nodes']] == [('mn1', 0),
                                                                                                    ('mn2', 1)]


TUNED = {
    'host': 'gpu2', 'measured_at': '2026-12-03T21:42:19Z',
    'modes': [{'name': 'plain', 'steps': 0}, {'name': 'eagle3', 'steps': 3}, {'name': 'eagle3_steps_<1>', 'steps': 1}],
    'levels': [{'concurrency': c, 'plain': {'output_tok_s': p}, 'eagle3': {'output_tok_s': e},
                'eagle3_steps_<1>': {'output_tok_s': o} if o else None}
               for c, p, e, o in ((1, 87.2, 129.1, 108.3), (2, 154.8, 181.7, None), (4, 260.7, 236.2, 259.8),
                                  (8, 395.4, 278.4, 340.9))],
    'recommended': {'threshold': 4},
}


def test_the_speculation_chart_draws_each_modes_throughput_and_the_threshold():
    svg = speculation.render('gpu2', TUNED)
    assert re.findall(r'class="mode" data-mode="([^"]+)"', svg) == ['plain', 'eagle3', 'eagle3_steps_&lt;1&gt;']
    # A point per measured level and mode (the level a mode did not measure has none), the figure in its tooltip.
    assert svg.count('<circle') == 11 and 'eagle3 at concurrency 8: 278.4 output tok/s' in svg
    assert svg.count('<polyline') == 3 and 'class="threshold"' in svg and 'threshold 4' in svg
    assert '<1>' not in svg
    assert speculation.summary(TUNED) == {'measured_at': '2026-12-03T21:42:19Z', 'threshold': 4,
                                          'modes': ['plain', 'eagle3', 'eagle3_steps_<1>']}


@pytest.mark.parametrize('table', [None, {}, {'levels': [], 'modes': []}, {'levels': [{'concurrency': 'x'}]},
                                   {'levels': [{'concurrency': 1, 'plain': None}], 'modes': [{'name': 'plain'}]}])
def test_no_speculation_chart_without_figures(table):
    assert speculation.render('gpu2', table) == ''


def test_the_speculation_chart_is_served_for_a_host_of_the_inventory_only(serve, tmp_path):
    served = serve()
    reports = served.app.state.dashboard.directory.hosts()['gpu2']['report_dir']
    path = os.path.join(reports, 'gpu2.speculation.json')
    os.makedirs(reports, exist_ok=True)
    kept = open(path).read() if os.path.exists(path) else None
    try:
        if kept is not None:
            os.remove(path)
        with urllib.request.urlopen(served.url + '/api/hosts/gpu2/speculation.svg', timeout=10) as response:
            assert response.status == 204
        with open(path, 'w') as handle:
            json.dump(TUNED, handle)
        with urllib.request.urlopen(served.url + '/api/hosts/gpu2/speculation.svg', timeout=10) as response:
            assert response.status == 200 and response.headers['Content-Type'].startswith('image/svg+xml')
            assert 'data-host="gpu2"' in response.read().decode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(served.url + '/api/hosts/..%2Fetc/speculation.svg', timeout=10)
        assert refused.value.code == 404
    finally:
        if kept is None:
            os.remove(path)
        else:
            with open(path, 'w') as handle:
                handle.write(kept)


@pytest.mark.parametrize('table', [
    {'levels': 3, 'modes': 'plain', 'recommended': [1]},
    {'levels': [{'concurrency': True, 'plain': {'output_tok_s': 1.0}}], 'modes': [{'name': 'plain'}]},
    {'levels': [{'concurrency': 1, 'plain': {'output_tok_s': 10 ** 400}}], 'modes': [{'name': ['x']}, {'name': 'plain'}],
     'measured_at': 7, 'recommended': {'threshold': True}},
    {'levels': [{'concurrency': 1, 'plain': {'output_tok_s': float('nan')}},
                {'concurrency': 2, 'plain': {'output_tok_s': -5}}], 'modes': [{'name': 'plain'}]},
], ids=['wrong-types', 'bool-level', 'huge-and-unhashable', 'nan-and-negative'])
def test_a_malformed_table_draws_nothing_and_never_crashes(table):
    assert speculation.render('gpu2', table) == ''
    found = speculation.summary(table)
    assert found['threshold'] is None and all(isinstance(name, str) for name in found['modes'])


def test_a_table_holding_nan_is_not_read(tmp_path):
    (tmp_path / 'gpu2.speculation.json').write_text('{"recommended": {"threshold": NaN}}')
    assert inventory.last_speculation(str(tmp_path), 'gpu2') is None
    (tmp_path / 'gpu2.speculation.json').write_text(json.dumps(TUNED))
    assert inventory.last_speculation(str(tmp_path), 'gpu2') == TUNED
