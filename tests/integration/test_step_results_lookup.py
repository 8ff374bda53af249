"""The lookup gpuops.sglang.sglang_run in a real play: the report's run is read from the variables the step table
names (registered results, facts, templated role variables), null where a step did not run; a step's include
skipped as a whole registers the skip over an earlier window's result, as the window's flow relies on."""
from helpers.ansible_run import run_tasks

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _steps


def test_the_run_reads_each_step_result_the_table_names_and_null_for_the_others(tmp_path):
    tasks = [
        {'name': 'stop', 'ansible.builtin.command': {'argv': ['true']}, 'register': '_sglang_stop',
         'changed_when': False},
        {'name': 'notes', 'ansible.builtin.set_fact': {
            '_sglang_run_id': 'gpu1-1', '_sglang_bake': {'bake': 'an earlier window'},
            # A role variable is a template until it is read: the lookup renders it.
            '_sglang_skip_reason': "{{ 'left ' ~ 'alone' }}"}},
        {'name': 'bake', 'ansible.builtin.include_tasks': 'missing.yml', 'when': False, 'register': '_sglang_bake'},
        {'name': 'run', 'ansible.builtin.debug': {'msg': "{{ lookup('gpuops.sglang.sglang_run') }}"}},
    ]
    run = run_tasks(tmp_path, tasks)['run']['msg']
    assert list(run) == list(_steps.run_keys())
    assert run['stop']['rc'] == 0 and run['run_id'] == 'gpu1-1' and run['skip_reason'] == 'left alone'
    assert run['bake']['skipped'] is True and 'bake' not in run['bake']
    assert run['start'] is None and run['rollback'] is None and run['decision'] is None and run['group'] is None


def test_a_step_skipped_because_a_later_task_did_its_work_is_read_from_that_task_result(tmp_path):
    tasks = [
        {'name': 'release', 'ansible.builtin.command': {'argv': ['true']}, 'when': False,
         'register': '_sglang_gpu_release'},
        {'name': 'start', 'ansible.builtin.set_fact': {
            '_sglang_start': {'healthy': True, 'release': {'elapsed': 0.1, 'killed': []}}}},
        {'name': 'run', 'ansible.builtin.debug': {'msg': "{{ lookup('gpuops.sglang.sglang_run') }}"}},
        # A group's rank 0 released in its own step, and its start carries no release: the step's result stays.
        {'name': 'release again', 'ansible.builtin.command': {'argv': ['true']}, 'register': '_sglang_gpu_release',
         'changed_when': False},
        {'name': 'start again', 'ansible.builtin.set_fact': {'_sglang_start': {'healthy': True, 'release': None}}},
        {'name': 'run again', 'ansible.builtin.debug': {'msg': "{{ lookup('gpuops.sglang.sglang_run') }}"}},
    ]
    results = run_tasks(tmp_path, tasks)
    assert results['run']['msg']['gpu_release'] == {'elapsed': 0.1, 'killed': []}
    assert results['run again']['msg']['gpu_release']['rc'] == 0
