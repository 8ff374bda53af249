"""The step table (plugin_utils/_steps.py) against the role it describes: the tags and registers of the task files,
the report's run (_sglang_run, sglang_report's options), and the two window flows, which must run the same steps
in the same order."""
import ast
import os
import re

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _steps

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


def test_the_role_hands_the_report_every_run_key_from_the_variable_the_table_names():
    run = load('vars', 'main.yml')['_sglang_run']
    assert list(run) == list(_steps.run_keys()) or set(run) == set(_steps.run_keys()), set(run) ^ set(_steps.run_keys())
    for key, source in _steps.run_sources().items():
        assert re.sub(r'\s+', ' ', run[key]) == '{{ %s | default(none) }}' % source, (key, run[key])


def test_sglang_report_documents_and_types_the_run_keys_of_the_table():
    with open(os.path.join(REPO, 'plugins', 'modules', 'sglang_report.py')) as handle:
        tree = ast.parse(handle.read())
    documentation = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                         and node.targets[0].id == 'DOCUMENTATION')
    suboptions = yaml.safe_load(documentation)['options']['run']['suboptions']
    assert list(suboptions) == list(_steps.run_keys())


def flow_steps(name):
    """The phases a window flow runs, in order: each step file it imports or includes (its tags), each task of its
    own (its tags), the handler flush as the start; the server group's barriers and second stop (rank 0 first, then
    the other ranks) are the group's way of running the same step."""
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


def test_both_window_flows_run_the_same_steps_in_the_same_order():
    single, group = flow_steps('window_single.yml'), flow_steps('window_group.yml')
    assert single == group
    # And in the table's order: the rollback (the flows' rescue) last.
    assert single == sorted(single, key=_steps.PHASES.index)
    assert single[0] == 'arm' and single[-1] == 'rollback' and 'start' in single
