"""The recorded redeploy (tests/fixtures/dashboard-records-redeploy-gpu2.json) and where its tasks are written now.

The records were taken from a real run of an older role, before records carried their task's place: each task
record's `task_path` is where a task with its title is written in the role today (relative to the collection,
as gpuops_dashboard.phases.TaskPhases reads it), so that its phase comes from that task's tag, as a live run's
does. When the role's files change (a task moves, a file is split), point the records at the new places:

    .venv/bin/python tests/helpers/recorded_run.py

test_dashboard_offline checks that every record still points at a task of its title and says so otherwise.
"""
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from gpuops_dashboard import phases  # noqa: E402  (run as a script too)

FIXTURE = os.path.join(REPO, 'tests', 'fixtures', 'dashboard-records-redeploy-gpu2.json')
# Tasks that run other tasks: a record of one of these titles is pointed at a task that does the work.
_INCLUDES = {'ansible.builtin.include_tasks', 'ansible.builtin.import_tasks', 'ansible.builtin.include_role',
             'ansible.builtin.import_role', 'include_tasks', 'import_tasks', 'include_role', 'import_role'}


def role_tasks(collection=REPO):
    """Every task of roles/sglang's tasks and handlers: [(task_path relative to the collection, RoleTask)]."""
    found = []
    for folder in phases.ROLE_TASK_FOLDERS:
        for path in sorted(glob.glob(os.path.join(collection, folder, '*.yml'))):
            with open(path) as handle:
                tasks = phases.role_tasks(handle.read())
            relative = os.path.relpath(path, collection)
            found.extend(('%s:%d' % (relative, task.line), task) for task in tasks)
    return found


def task_path_of(title, collection=REPO):
    """Where the task of that title is written now (one that does the work before an include of the same title);
    None when no task has it."""
    places = [(bool(task.keywords & _INCLUDES), task_path) for task_path, task in role_tasks(collection)
              if task.name == title]
    return min(places)[1] if places else None


def records():
    """The recorded run's progress records, each task's phase read from the role as it is now."""
    with open(FIXTURE) as handle:
        loaded = json.load(handle)
    for record in loaded:
        if record.get('kind') == 'task':
            record['phase'] = phases.phase_of(record)
    return loaded


def repoint():
    """Point every task record at the task of its title in the role now (no task_path where none has it)."""
    with open(FIXTURE) as handle:
        loaded = json.load(handle)
    pointed = []
    for record in loaded:
        task_path = task_path_of(record['task']) if record.get('kind') == 'task' else None
        record = dict((key, value) for key, value in record.items() if key != 'task_path')
        ordered = {}
        for key, value in record.items():
            ordered[key] = value
            if key == 'task':
                ordered['task_path'] = task_path
        ordered['phase'] = phases.phase_of(ordered) if record.get('kind') == 'task' else None
        pointed.append(ordered)
    with open(FIXTURE, 'w') as handle:
        handle.write('[\n' + ',\n'.join(json.dumps(record) for record in pointed) + '\n]\n')
    return pointed


if __name__ == '__main__':
    for record in repoint():
        if record.get('kind') == 'task' and record['state'] != 'started':
            print('%-11s %-45s %s' % (record['phase'], record['task_path'], record['task']))
