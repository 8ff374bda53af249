"""The step table (plugin_utils/_steps.py) against the role it describes: the tags and registers of the task files,
the report's run and the window's reset (the lookup sglang_run, from the table), and the window's one flow, which
runs the table's steps in its order."""
import ast
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _steps, _timing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLE = os.path.join(REPO, 'roles', 'sglang')
NESTED = ('block', 'rescue', 'always')
INCLUDES = ('ansible.builtin.import_tasks', 'ansible.builtin.include_tasks')


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle) or []


def walk(tasks, inherited=()):
    """Every task, blocks opened, in order, with the tags it carries (its own and its blocks')."""
    for task in tasks:
        tags = tuple(inherited) + tuple(task.get('tags') or ())
        if any(key in task for key in NESTED):
            for key in NESTED:
                yield from walk(task.get(key) or [], tags)
        else:
            yield task, tags


def role_tasks():
    """(file, task, tags) of every task and handler of the role."""
    for folder in ('tasks', 'handlers'):
        for name in sorted(os.listdir(os.path.join(ROLE, folder))):
            for task, tags in walk(load(folder, name)):
                yield '%s/%s' % (folder, name), task, tags


def test_the_table_names_each_phase_and_run_key_once():
    assert len(set(_steps.PHASES)) == len(_steps.PHASES)
    assert len(set(_steps.run_keys())) == len(_steps.run_keys())
    assert set(_steps.WINDOW_PHASES) <= set(_steps.PHASES)
    assert all(re.match(r'^#[0-9a-f]{6}$', step.colour) for step in _steps.STEPS)


def test_every_phase_tag_of_the_role_is_a_step_and_every_step_is_tagged():
    tagged = {}
    for where, task, tags in role_tasks():
        for tag in tags:
            if tag.startswith(_steps.PHASE_TAG_PREFIX):
                tagged.setdefault(tag[len(_steps.PHASE_TAG_PREFIX):], []).append(where)
    assert set(tagged) == set(_steps.PHASES), set(tagged) ^ set(_steps.PHASES)


@pytest.mark.parametrize('step', [step for step in _steps.STEPS if step.results], ids=lambda step: step.phase)
def test_each_result_of_a_step_is_registered_by_a_task_of_that_step(step):
    registered = {}
    for where, task, tags in role_tasks():
        names = [task['register']] if 'register' in task else list((task.get('ansible.builtin.set_fact') or {}))
        for name in names:
            registered.setdefault(name, set()).update(tag for tag in tags if tag.startswith(_steps.PHASE_TAG_PREFIX))
    for key, variable in step.results:
        assert variable in registered, '%s (run key %s) is registered or set by no task of the role' % (variable, key)
        assert _steps.tag(step.phase) in registered[variable], (
            '%s (run key %s) is registered by tasks tagged %s, not %s'
            % (variable, key, sorted(registered[variable]), _steps.tag(step.phase)))


def test_the_role_hands_the_report_the_run_the_step_table_names():
    """The report's run is the lookup's (which reads the table), in both places the role writes a report."""
    for name in ('window.yml', 'report.yml'):
        reports = [task['gpuops.sglang.sglang_report'] for task, dummy in walk(load('tasks', name))
                   if 'gpuops.sglang.sglang_report' in task and 'run' in task['gpuops.sglang.sglang_report']]
        assert reports and all(re.sub(r'\s+', '', report['run']) == "{{lookup('gpuops.sglang.sglang_run')}}"
                               for report in reports), (name, reports)
    assert '_sglang_run' not in load('vars', 'main.yml')


def test_the_include_of_a_step_run_only_when_needed_registers_its_result_and_no_other_include_does():
    """Skipped as a whole, the include registers the skip over an earlier window's result; the stop's two includes
    (rank 0's, then the other ranks') must not, or the one that does not apply would register over the other."""
    registered = {task[key]: task.get('register')
                  for name in ('main.yml', 'window_steps.yml', 'release.yml') for task, dummy in walk(load('tasks', name))
                  for key in INCLUDES if key in task and task[key] not in ('group_barrier.yml', 'release.yml')}
    for step in _steps.STEPS:
        if step.phase + '.yml' in registered:
            assert registered[step.phase + '.yml'] == (step.results[0][1] if step.when_needed else None), step.phase
    assert {name for name, variable in registered.items() if variable} == {
        'prefetch.yml', 'perf_before.yml', 'kill.yml', 'patch.yml', 'restore.yml', 'perf_after.yml', 'bake.yml'}


def test_a_step_with_one_result_names_it_after_itself():
    for step in _steps.STEPS:
        if len(step.results) == 1 and step.phase in _steps.FLOW_PHASES and step.phase != 'perf_after':
            assert step.results == ((step.phase, '_sglang_' + step.phase),), step


def flow_steps(name):
    """The phases a window flow runs, in order: each step file it imports or includes (its tags; a file of the
    group's, its own steps' tags), each task of its own (its tags), the handler flush as the start; the server
    group's barriers and second stop (rank 0 first, then the other ranks) are the group's way of running the same
    step."""
    handler_phases = [tag for task, tags in walk(load('handlers', 'main.yml')) for tag in tags]
    found = []
    for task, tags in walk(load('tasks', name)):
        include = next((task[key] for key in INCLUDES if key in task), None)
        if include == 'group_barrier.yml':
            continue
        if include:
            phases = [tag for dummy, inner in walk(load('tasks', include)) for tag in inner]
        elif task.get('ansible.builtin.meta') == 'flush_handlers':
            phases = handler_phases
        else:
            phases = list(tags)
        for tag in phases:
            phase = tag[len(_steps.PHASE_TAG_PREFIX):] if tag.startswith(_steps.PHASE_TAG_PREFIX) else None
            if phase and (not found or found[-1] != phase):
                found.append(phase)
    return found


def test_the_window_runs_every_step_of_the_table_in_its_order_then_the_rollback():
    assert flow_steps('window_steps.yml') == list(_steps.FLOW_PHASES) + ['rollback']


def test_the_flow_test_fails_on_a_flow_out_of_the_tables_order(tmp_path, monkeypatch):
    swapped = [task for task in load('tasks', 'window_steps.yml')[0]['block']]
    stop = next(index for index, task in enumerate(swapped) if task.get('ansible.builtin.include_tasks') == 'stop.yml')
    release = next(index for index, task in enumerate(swapped)
                   if task.get('ansible.builtin.import_tasks') == 'release.yml')
    swapped[stop], swapped[release] = swapped[release], swapped[stop]
    for folder in ('tasks', 'handlers'):
        (tmp_path / folder).mkdir()
        for name in os.listdir(os.path.join(ROLE, folder)):
            (tmp_path / folder / name).write_text(open(os.path.join(ROLE, folder, name)).read())
    (tmp_path / 'tasks' / 'window_steps.yml').write_text(yaml.safe_dump([{'block': swapped, 'rescue': []}]))
    monkeypatch.setitem(globals(), 'ROLE', str(tmp_path))
    assert flow_steps('window_steps.yml') != list(_steps.FLOW_PHASES) + ['rollback']


def test_each_timing_term_belongs_to_a_step_of_the_window():
    assert set(_timing.STEP_TERMS) <= set(_steps.FLOW_PHASES), set(_timing.STEP_TERMS) - set(_steps.FLOW_PHASES)


@pytest.mark.parametrize('group', [None, {'name': 'g'}], ids=['single node', 'server group'])
@pytest.mark.parametrize('strays', [[], [{'pid': 7}]], ids=['no strays', 'strays'])
def test_the_gpus_are_released_once_by_the_start_or_by_gpu_release_and_the_report_reads_either(group, strays):
    """A single-node server's start releases its GPUs in its own run (the handler's `release`) unless the stop found
    strays; release.yml's gpu_release runs exactly where the start does not, with the same options."""
    import jinja2
    environment = jinja2.Environment()
    environment.filters['bool'] = bool
    environment.tests['skipped'] = lambda result: bool((result or {}).get('skipped'))

    def value(text, **context):
        text = text.strip()
        return environment.compile_expression(text[2:-2] if text.startswith('{{') else text)(**context)
    imported = next(task for task, dummy in walk(load('tasks', 'window_steps.yml'))
                    if task.get('ansible.builtin.import_tasks') == 'release.yml')
    start_releases = value(imported['vars']['_sglang_start_releases'], _sglang_group=group,
                           _sglang_stop={'strays': strays, 'stopping': [41]})
    release = next(task for task, dummy in walk(load('tasks', 'release.yml')) if 'gpuops.sglang.gpu_release' in task)
    released_here = value(release['when'], _sglang_start_releases=start_releases)
    handler = next(task for task, dummy in walk(load('handlers', 'main.yml')) if 'gpuops.sglang.sglang_server' in task)
    options = {'sglang_term_timeout': 30, 'sglang_gpu_max_used_mib': 0, 'sglang_gpu_release_timeout': 30,
               'sglang_gpus': [], 'sglang_gpu_driver_info': '', '_sglang_stop': {'stopping': [41]}}
    by_start = value(handler['gpuops.sglang.sglang_server']['release'],
                     _sglang_gpu_release={'skipped': True} if not released_here else {'rc': 0}, **options)
    assert released_here == (group is not None or bool(strays))
    assert (by_start is not None) == (not released_here)
    assert by_start is None or set(by_start) == set(release['gpuops.sglang.gpu_release']) - {'guard'}
    assert by_start is None or by_start['await_exit'] == [41]
    # The report reads the step from the start's result where its own task was skipped.
    assert _steps.carried() == {'gpu_release': (handler['register'], 'release')}
