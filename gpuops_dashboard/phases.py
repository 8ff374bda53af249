"""From ansible-runner events to progress: which step of a redeploy each host is in.

Pure functions over event dicts, so a dashboard can rebuild a run's progress and timeline from
the events it stored, long after the run ended.
"""

# Task names of roles/sglang (tasks and handler) -> the phase an operator sees. A unit test checks
# that every name here still exists in the role, so a renamed task cannot silently drop a phase.
TASK_PHASES = {
    'Plan this host\'s run (the rollout gate, the variable rules, the server\'s flags and files)': 'preflight',
    'Read what the decision needs, in one round trip': 'preflight',
    'Ask the host how its server runs, whether it is healthy and what would change': 'preflight',
    'Carry out the earlier run\'s guard now': 'takeover',
    'Dry-run the patch against the installed sglang (nothing stops if this fails)': 'preflight',
    'Decide whether the server must be redeployed': 'preflight',
    'Check that nvidia-smi answers and see who holds the GPUs': 'prepare',
    'Check that the container runs and see which SGLang processes it has': 'prepare',
    'Ensure the configuration folders exist': 'prepare',
    'Install the launcher (systemd\'s ExecStart; an operator\'s hand restart of a detached server)': 'prepare',
    'Write the candidate configuration next to the live files': 'prepare',
    'Read whether the router lists this server (one it does not list stays out after the run)': 'prepare',
    'Take a slot in the fleet\'s unavailability budget (sglang_max_unavailable)': 'slot',
    'Decide again whether this host takes part, after waiting for room': 'slot',
    'Arm the host-side guard (commit confirmed)': 'arm',
    'Take the server out of the router (no new request reaches it)': 'router_out',
    'Benchmark the old server (the performance gate\'s baseline)': 'perf_before',
    'Benchmark the new server (the performance gate\'s candidate)': 'perf_after',
    'Judge the new server against the baseline (a slower one is rolled back)': 'perf_after',
    'Stop the server gracefully (the outage starts here)': 'stop',
    'Stop what is left of SGLang inside the container': 'kill',
    'Release the GPUs and prove their memory is free': 'gpu_release',
    'Apply the patch': 'patch',
    'Restart the SGLang server': 'start',
    'Put the verified server back into the router': 'router_in',
    'Confirm the new server (the guard is dropped)': 'confirm',
    'Roll back now (the guard restores the pre-run files and starts the previous server)': 'rollback',
    'Summarise this host\'s run': 'report',
}

# The order phases happen in, and what each is called on the page and in the timeline.
PHASE_LABELS = (
    ('preflight', 'preflight'),
    ('takeover', 'earlier guard carried out'),
    ('prepare', 'prepare'),
    ('slot', 'room in the fleet'),
    ('arm', 'guard armed'),
    ('router_out', 'out of the router'),
    ('perf_before', 'benchmark old server'),
    ('stop', 'drain + stop'),
    ('kill', 'kill in container'),
    ('gpu_release', 'GPUs free'),
    ('patch', 'patch'),
    ('configure', 'configure'),
    ('start', 'start to healthy'),
    ('perf_after', 'benchmark new server'),
    ('router_in', 'back in the router'),
    ('confirm', 'confirmed'),
    ('rollback', 'rollback'),
    ('report', 'report'),
)
PHASES = tuple(name for name, _ in PHASE_LABELS)
# The outage window: from the stop to the end of the start (the first healthy answer).
WINDOW_PHASES = ('stop', 'kill', 'gpu_release', 'patch', 'configure', 'start')

_HOST_STATES = {
    'runner_on_start': 'started',
    'runner_on_ok': 'ok',
    'runner_on_failed': 'failed',
    'runner_on_skipped': 'skipped',
    'runner_on_unreachable': 'unreachable',
    'runner_retry': 'retry',
}


def progress_record(event):
    """One ansible-runner event -> a small progress record, or None for events a dashboard need not keep.

    Record keys: seq, at (ISO time on the controller), kind ('task', 'play', 'stats'), host, task,
    phase (None outside the named phases), state (started|ok|failed|skipped|unreachable|retry),
    changed, attempts (for retries), msg (failures only), and for 'stats' the run's artifacts.
    """
    kind = event.get('event')
    data = event.get('event_data') or {}
    record = {'seq': event.get('counter'), 'at': event.get('created'), 'host': None, 'task': None, 'phase': None,
              'state': None, 'changed': False, 'attempts': None, 'msg': None}
    if kind in _HOST_STATES:
        res = data.get('res') or {}
        task = data.get('task') or ''
        record.update(kind='task', host=data.get('host'), task=task, phase=TASK_PHASES.get(task),
                      state=_HOST_STATES[kind], changed=bool(res.get('changed')) if isinstance(res, dict) else False)
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
            current = {'phase': record['phase'], 'label': labels[record['phase']], 'start': record['at'],
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
