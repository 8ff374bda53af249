"""The guard's lease: renewals, expiry and the watcher's decision, on a fake clock and fake holders."""
import json
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils import _lease

ARMED = {'run_id': 'run-1', 'armed_at': 1000.0, 'deadline': 2800.0, 'idle': 90.0}


def lease(**keys):
    document = {'run_id': 'run-1', 'by': 'a step', 'renewed_at': 1100.0, 'expires_at': 1190.0, 'holder': None,
                'held_until': None}
    document.update(keys)
    return document


def alive(holder):
    return holder.get('alive', False)


@pytest.mark.parametrize('state, document, now, bound', [
    # The arm counts as the first renewal.
    (ARMED, None, 1089.9, None),
    (ARMED, None, 1090.0, 'idle'),
    # A renewal moves the expiry.
    (ARMED, lease(), 1189.9, None),
    (ARMED, lease(), 1190.0, 'idle'),
    # A step that still runs holds the lease until its horizon...
    (ARMED, lease(holder={'alive': True}, held_until=1500.0), 1400.0, None),
    (ARMED, lease(holder={'alive': True}, held_until=1500.0), 1500.0, 'idle'),
    # ...but once its process is gone (killed with the ssh session) only the idle bound counts.
    (ARMED, lease(holder={'alive': False}, held_until=1500.0), 1190.0, 'idle'),
    # Another run's lease is not this guard's: the arm's own bound counts.
    (ARMED, lease(run_id='run-0', expires_at=5000.0), 1090.0, 'idle'),
    # The deadline comes first when the lease reaches past it.
    (ARMED, lease(expires_at=3000.0), 2799.9, None),
    (ARMED, lease(expires_at=3000.0), 2800.0, 'deadline'),
    # A guard without an idle bound (armed before the lease): only the deadline.
    (dict(ARMED, idle=None), None, 2000.0, None),
    (dict(ARMED, idle=None), None, 2800.0, 'deadline'),
], ids=['arm-holds', 'arm-lapses', 'renewed-holds', 'renewed-lapses', 'holder-runs', 'holder-horizon-ends',
        'holder-dead', 'other-run', 'deadline-holds', 'deadline-first', 'no-idle-holds', 'no-idle-deadline'])
def test_the_watcher_acts_at_the_first_bound_that_passed(state, document, now, bound):
    assert _lease.due(state, document, now, alive) == bound


@pytest.mark.parametrize('holder, horizon, expires, held_until', [
    (None, 0, 1190.0, None),
    # Nobody runs on (a step's last renewal): the next step's time counts by the clock alone.
    (None, 60, 1250.0, None),
    ({'pid': 1, 'start_time': 2}, 60, 1190.0, 1250.0),
])
def test_a_renewal_gives_the_idle_bound_and_the_horizon_only_while_its_holder_runs(holder, horizon, expires,
                                                                                   held_until):
    document = _lease.lease_document('run-1', 'a step', 1100.0, horizon, 90, holder)
    assert document['expires_at'] == expires and document['held_until'] == held_until
    assert document['renewed_at'] == 1100.0 and document['by'] == 'a step' and document['holder'] == holder


def write_state(folder, **state):
    (folder / 'state.json').write_text(json.dumps(dict(ARMED, **state)))


def test_renew_writes_the_lease_of_the_armed_run(tmp_path):
    write_state(tmp_path)
    written = _lease.renew(str(tmp_path), 'run-1', 'sglang_server restarted', 5, clock=lambda: 1200.0)
    assert written == _lease.read_lease(str(tmp_path))
    assert written['expires_at'] == 1295.0 and written['by'] == 'sglang_server restarted'
    assert oct(os.stat(str(tmp_path / 'lease.json')).st_mode & 0o777) == '0o600'


@pytest.mark.parametrize('state', [None, {'run_id': 'run-0'}], ids=['restored', 'another-run'])
def test_a_renewal_of_a_guard_that_is_not_the_runs_is_refused_and_writes_nothing(tmp_path, state):
    if state is not None:
        write_state(tmp_path, **state)
    with pytest.raises(_lease.LeaseError, match='the rollback guard of run run-1 is not armed'):
        _lease.renew(str(tmp_path), 'run-1', 'gpu_release')
    assert not (tmp_path / 'lease.json').exists()


def test_a_guard_without_an_idle_bound_has_nothing_to_renew(tmp_path):
    write_state(tmp_path, idle=None)
    assert _lease.renew(str(tmp_path), 'run-1', 'gpu_release') is None
    assert not (tmp_path / 'lease.json').exists()


def test_the_holder_is_this_process_until_it_exits():
    me = _lease.this_process()
    assert me['pid'] == os.getpid() and _lease.holder_alive(me)
    # The same PID with another start time is another process (the PID was reused).
    assert not _lease.holder_alive(dict(me, start_time=me['start_time'] + 1))


def test_the_renewer_renews_at_most_every_few_seconds_while_a_wait_polls(tmp_path):
    write_state(tmp_path)
    now = [1100.0]
    renewer = _lease.Renewer(str(tmp_path), 'run-1', 'sglang_server restarted', clock=lambda: now[0], after=30,
                             holder={'pid': 1, 'start_time': 2})
    renewer.renew(60)
    for dummy in range(7):
        now[0] += 0.25
        renewer.tick(5)
    assert renewer.renewals == 1
    now[0] += 2.0
    renewer.tick(5)
    assert renewer.renewals == 2 and _lease.read_lease(str(tmp_path))['held_until'] == now[0] + 5 + 90
    renewer.done()
    last = _lease.read_lease(str(tmp_path))
    assert last['holder'] is None and last['expires_at'] == now[0] + 30 + 90
    assert last['by'] == 'sglang_server restarted (done)'


def test_without_a_guard_the_renewer_does_nothing():
    renewer = _lease.Renewer.from_option(None, 'gpu_release')
    assert renewer.renew(60) is None and renewer.done() is None
    renewer.tick()
    assert renewer.renewals == 0


def test_the_query_describes_the_lease_of_the_armed_guard():
    assert _lease.describe(None, None) is None
    described = _lease.describe(ARMED, lease(), alive)
    assert described == {'armed_at': 1000.0, 'idle': 90.0, 'deadline_at': 2800.0, 'renewed_at': 1100.0,
                         'renewed_by': 'a step', 'expires_at': 1190.0, 'acts_at': 1190.0}


@pytest.mark.parametrize('restorer, refusal', [
    ('me', 'is restoring the previous server'),
    ({'pid': 2 ** 22 + 3, 'start_time': 1}, 'did not finish .its process is gone.'),
], ids=['running', 'died-midway'])
def test_a_renewal_of_a_guard_marked_restoring_is_refused_and_writes_nothing(tmp_path, restorer, refusal):
    mark = _lease.restoring_mark('idle', 1500.0) if restorer == 'me' else dict(restorer, by='idle', at=1500.0)
    write_state(tmp_path, restoring=mark)
    with pytest.raises(_lease.LeaseError, match=refusal):
        _lease.renew(str(tmp_path), 'run-1', 'sglang_server activate')
    assert not (tmp_path / 'lease.json').exists()
