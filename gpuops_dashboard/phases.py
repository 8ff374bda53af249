"""From ansible-runner events to progress: which step of a redeploy each host is in.

A task of roles/sglang that marks a phase says so with a tag, `gpuops_phase_<phase>` (<phase> one of PHASES):

    - name: Stop the server gracefully (the outage starts here)
      gpuops.sglang.sglang_server: ...
      tags: [gpuops_phase_stop]

ansible-runner's events do not carry a task's tags, but they carry where the task is written
(event_data.task_path, "/path/roles/sglang/tasks/stop.yml:6"): the phase is read from the tags of the task
that starts at that line (TaskPhases), so a task's title can change freely.

Pure functions over event dicts and records, so a dashboard can rebuild a run's progress and timeline from
the events it stored, long after the run ended; the one that reads the role's files is passed in
(`phase_at`), TaskPhases over this checkout by default.
"""
import collections
import os
import threading

import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils._steps import PHASE_TAG_PREFIX, PHASES, STEPS, WINDOW_PHASES

# The order phases happen in, and what each is called on the page and in the timeline: the role's step table.
PHASE_LABELS = tuple((step.phase, step.label) for step in STEPS)
__all__ = ['PHASE_LABELS', 'PHASES', 'PHASE_TAG_PREFIX', 'WINDOW_PHASES']
COLLECTION = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The only files whose tasks have phases: the role's tasks and handlers.
ROLE_TASK_FOLDERS = (os.path.join('roles', 'sglang', 'tasks'), os.path.join('roles', 'sglang', 'handlers'))
_NESTED = ('block', 'rescue', 'always')
_SafeLoader = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)


def phase_tags(tags):
    """The phases named by a task's tags (a list, or one comma-separated string as Ansible also takes)."""
    if isinstance(tags, str):
        tags = tags.split(',')
    if not isinstance(tags, (list, tuple)):
        return []
    return [tag.strip()[len(PHASE_TAG_PREFIX):] for tag in tags
            if isinstance(tag, str) and tag.strip().startswith(PHASE_TAG_PREFIX)]


def _plain(node):
    """A composed YAML node as plain data (scalars as text: only names and tags are read)."""
    if isinstance(node, yaml.ScalarNode):
        return node.value
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item) for item in node.value]
    return None


RoleTask = collections.namedtuple('RoleTask', 'line name phases keywords')


def role_tasks(text):
    """Every task of a role's task or handler file, blocks opened, in file order: RoleTask(line, name, phases
    named by its tags, the set of its keywords). `line` is where the task's mapping starts, counted from 1: the
    line of Ansible's task_path.
    """
    found = []

    def walk(node):
        if not isinstance(node, yaml.SequenceNode):
            return
        for task in node.value:
            if not isinstance(task, yaml.MappingNode):
                continue
            keys = dict((key.value, value) for key, value in task.value if isinstance(key, yaml.ScalarNode))
            found.append(RoleTask(task.start_mark.line + 1, _plain(keys['name']) if 'name' in keys else None,
                                  phase_tags(_plain(keys['tags'])) if 'tags' in keys else [], frozenset(keys)))
            for nested in _NESTED:
                if nested in keys:
                    walk(keys[nested])
    # compose, not load: no object is built, and the nodes keep their lines.
    walk(yaml.compose(text, Loader=_SafeLoader))
    return found


class TaskPhases(object):
    """task_path -> phase: the phase the `gpuops_phase_*` tag of the task at that file and line names.

    Reads only .yml/.yaml files inside roles/sglang/tasks or roles/sglang/handlers of `collection` (after
    symlinks are resolved, so the link under .cache/collections through which ansible-playbook reads this
    checkout leads here); a relative task_path is taken from `collection`. A task with no phase tag, with
    two, or with one naming no known phase, any other file, and a file that cannot be read have None. Each
    file is parsed once per (modification time, size). Safe to call from several threads.
    """

    def __init__(self, collection=COLLECTION):
        self.collection = os.path.realpath(collection)
        self._folders = tuple(os.path.join(self.collection, folder) + os.sep for folder in ROLE_TASK_FOLDERS)
        self._files = {}
        self._lock = threading.Lock()

    def __call__(self, task_path):
        if not isinstance(task_path, str):
            return None
        path, _, line = task_path.rpartition(':')
        if not path or not line.isdigit():
            return None
        path = os.path.realpath(os.path.join(self.collection, path))
        if not path.endswith(('.yml', '.yaml')) or not path.startswith(self._folders):
            return None
        return self._phases(path).get(int(line))

    def _phases(self, path):
        try:
            status = os.stat(path)
        except OSError:
            return {}
        version = (status.st_mtime_ns, status.st_size)
        with self._lock:
            cached = self._files.get(path)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            with open(path, encoding='utf-8') as handle:
                tasks = role_tasks(handle.read())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            tasks = []
        phases = dict((task.line, task.phases[0]) for task in tasks
                      if len(task.phases) == 1 and task.phases[0] in PHASES)
        with self._lock:
            self._files[path] = (version, phases)
        return phases


# This checkout's role, as ansible-playbook runs it from a dashboard (gpuops_dashboard.redeploy).
phase_at_task_path = TaskPhases()


def phase_of(item, phase_at=None):
    """The phase of an ansible-runner event or a progress record (None outside the named phases): from the
    tags of the task at its task_path. `phase_at(task_path) -> phase` defaults to this checkout's role."""
    data = item.get('event_data') if 'event_data' in item else item
    task_path = (data or {}).get('task_path')
    if not task_path:
        return None
    return (phase_at or phase_at_task_path)(task_path)


_HOST_STATES = {
    'runner_on_start': 'started',
    'runner_on_ok': 'ok',
    'runner_on_failed': 'failed',
    'runner_on_skipped': 'skipped',
    'runner_on_unreachable': 'unreachable',
    'runner_retry': 'retry',
}


def progress_record(event, phase_at=None):
    """One ansible-runner event -> a small progress record, or None for events a dashboard need not keep.

    Record keys: seq, at (ISO time on the controller), kind ('task', 'play', 'stats'), host, task (its title,
    for people), task_path (where the task is written, file:line), phase (phase_of: None outside the named
    phases), state (started|ok|failed|skipped|unreachable|retry), changed, attempts (for retries), msg
    (failures only), and for 'stats' the run's artifacts. `phase_at`: as for phase_of.
    """
    kind = event.get('event')
    data = event.get('event_data') or {}
    record = {'seq': event.get('counter'), 'at': event.get('created'), 'host': None, 'task': None,
              'task_path': None, 'phase': None, 'state': None, 'changed': False, 'attempts': None, 'msg': None}
    if kind in _HOST_STATES:
        res = data.get('res') or {}
        record.update(kind='task', host=data.get('host'), task=data.get('task') or '',
                      task_path=data.get('task_path'), phase=phase_of(event, phase_at), state=_HOST_STATES[kind],
                      changed=bool(res.get('changed')) if isinstance(res, dict) else False)
        if kind == 'runner_retry':
            # An `until` loop's attempt so far, of how many (event_data.retries).
            record['attempts'] = res.get('attempts')
            record['retries'] = data.get('retries') or res.get('retries')
        if kind in ('runner_on_failed', 'runner_on_unreachable') and isinstance(res, dict):
            record['msg'] = str(res.get('msg', ''))[:2000]
            if data.get('ignore_errors'):
                record['state'] = 'failed_ignored'
        if kind == 'runner_on_skipped':
            return record if record['phase'] else None
        return record
    if kind == 'playbook_on_play_start':
        record.update(kind='play', task=data.get('play'))
        return record
    if kind == 'playbook_on_stats':
        record.update(kind='stats', artifacts=data.get('artifact_data') or {},
                      stats=dict((key, data.get(key) or {}) for key in ('ok', 'changed', 'failures', 'dark',
                                                                          'skipped', 'rescued', 'ignored')))
        return record
    return None


def host_phases(records):
    """Per host: the phases seen, in order, each {phase, label, start, end, state}.

    A phase's start is its first task's start event and its end its last result (controller clock);
    a phase still running has end None.
    """
    labels = dict(PHASE_LABELS)
    hosts = {}
    for record in records:
        if record.get('kind') != 'task' or not record.get('phase') or not record.get('host'):
            continue
        phases = hosts.setdefault(record['host'], [])
        current = phases[-1] if phases and phases[-1]['phase'] == record['phase'] else None
        if current is None:
            if record['state'] == 'skipped':
                continue
            # A stored run of another release of the role may name a phase this one does not have: shown by name.
            current = {'phase': record['phase'], 'label': labels.get(record['phase'], record['phase']),
                       'start': record['at'],
                       'end': None, 'state': 'running', 'attempts': None, 'msg': None, '_done': 0}
            phases.append(current)
        if record['state'] == 'started':
            current['end'] = None
            current['state'] = 'running'
        elif record['state'] == 'skipped' and not current['_done']:
            # Only a skipped task made this phase: it did not happen.
            phases.pop()
        elif record['state'] == 'retry':
            current['attempts'] = record['attempts']
        else:
            current['_done'] += 1
            current['end'] = record['at']
            current['state'] = {'ok': 'ok', 'skipped': 'ok', 'failed_ignored': 'failed'}.get(record['state'],
                                                                                          record['state'])
            if record.get('msg'):
                current['msg'] = record['msg']
    for phases in hosts.values():
        for phase in phases:
            phase.pop('_done', None)
    return hosts


def current_phase(records):
    """Per host: the latest phase and its state, e.g. {'gpu1': {'phase': 'stop', 'state': 'running'}}."""
    return dict((host, {'phase': phases[-1]['phase'], 'label': phases[-1]['label'], 'state': phases[-1]['state'],
                        'attempts': phases[-1]['attempts']})
                for host, phases in host_phases(records).items() if phases)


# Report statuses of a host whose run did not leave it as asked (plugin_utils/_report.py).
FAILED_STATUSES = ('failed', 'rolled_back')


def failure_reason(status, hosts, records, error=None):
    """Why a finished run failed, in one text for the page (None for a successful or cancelled run): each failed
    host's report reason (`hosts`: the run's per-host summary), else each failed task's message as the records
    kept it (a refusal before any report: undo.yml's own checks, an unreachable host), else the runner's error."""
    if status != 'failed':
        return None
    reasons = ['%s: %s' % (host, report.get('reason') or report.get('status'))
               for host, report in sorted((hosts or {}).items())
               if isinstance(report, dict) and report.get('status') in FAILED_STATUSES]
    if not reasons:
        for record in records:
            if record.get('kind') == 'task' and record.get('state') in ('failed', 'unreachable'):
                reason = '%s: %s' % (record.get('host'), record.get('msg') or record.get('task'))
                if reason not in reasons:
                    reasons.append(reason)
    return '; '.join(reasons) or error or 'the run failed without a failed task or report (see its artifacts)'
