"""The guard's lease: renewals, expiry and the watcher's decision, on a fake clock and fake holders."""
import json
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _lease

from helpers.stepped_clock import WALL_AT_BOOT, SteppedClock

# Armed at 1000 s on the boot clock; its wall-clock times (display) WALL_AT_BOOT later.
ARMED = {'run_id': 'run-1', 'armed_at': WALL_AT_BOOT + 1000.0, 'deadline': WALL_AT_BOOT + 2800.0, 'idle': 90.0,
         'boot_id': 'boot-1', 'armed_at_boot': 1000.0, 'deadline_boot': 2800.0}
# A guard armed by an earlier release: wall-clock times only.
ARMED_ON_WALL = {'run_id': 'run-1', 'armed_at': 1000.0, 'deadline': 2800.0, 'idle': 90.0}


def lease(**keys):
    document = {'run_id': 'run-1', 'by': 'a step', 'holder': None, 'boot_id': 'boot-1',
                'renewed_at_boot': 1100.0, 'expires_at_boot': 1190.0, 'held_until_boot': None}
    document.update(keys)
    for name in ('renewed_at', 'expires_at', 'held_until'):
        # The wall-clock times say nothing about the bounds: far from the boot clock's, as on a real host.
        if name not in keys:
            document[name] = None if document[name + '_boot'] is None else WALL_AT_BOOT + document[name + '_boot']
    return document


def wall_lease(**keys):
    """A renewal by a module of an earlier release: wall-clock times only."""
    document = {'run_id': 'run-1', 'by': 'a step', 'renewed_at': 1100.0, 'expires_at': 1190.0, 'holder': None,
                'held_until': None}
    document.update(keys)
    return document


def alive(holder):
    return holder.get('alive', False)


def boot_at(seconds, wall_step=0.0, boot_id='boot-1'):
    """The host's clocks when the boot clock reads `seconds`: the wall clock stepped by wall_step since the arm."""
    return _lease.Instant(WALL_AT_BOOT + seconds + wall_step, seconds, boot_id)


@pytest.mark.parametrize('wall_step', [0.0, 3600.0, -3600.0], ids=['wall-kept', 'wall-stepped-forward',
                                                                   'wall-stepped-back'])
@pytest.mark.parametrize('state, document, now, bound', [
    # The arm counts as the first renewal.
    (ARMED, None, 1089.9, None),
    (ARMED, None, 1090.0, 'idle'),
    # A renewal moves the expiry.
    (ARMED, lease(), 1189.9, None),
    (ARMED, lease(), 1190.0, 'idle'),
    # A step that still runs holds the lease until its horizon...
    (ARMED, lease(holder={'alive': True}, held_until_boot=1500.0), 1400.0, None),
    (ARMED, lease(holder={'alive': True}, held_until_boot=1500.0), 1500.0, 'idle'),
    # ...but once its process is gone (killed with the ssh session) only the idle bound counts.
    (ARMED, lease(holder={'alive': False}, held_until_boot=1500.0), 1190.0, 'idle'),
    # Another run's lease is not this guard's: the arm's own bound counts.
    (ARMED, lease(run_id='run-0', expires_at_boot=5000.0), 1090.0, 'idle'),
    # Nor is a renewal of another boot's, or one without boot-clock readings (a module of an earlier release).
    (ARMED, lease(boot_id='boot-0', expires_at_boot=5000.0), 1090.0, 'idle'),
    (ARMED, wall_lease(expires_at=WALL_AT_BOOT + 5000.0), 1090.0, 'idle'),
    # The deadline comes first when the lease reaches past it.
    (ARMED, lease(expires_at_boot=3000.0), 2799.9, None),
    (ARMED, lease(expires_at_boot=3000.0), 2800.0, 'deadline'),
    # A guard without an idle bound (armed before the lease): only the deadline.
    (dict(ARMED, idle=None), None, 2000.0, None),
    (dict(ARMED, idle=None), None, 2800.0, 'deadline'),
], ids=['arm-holds', 'arm-lapses', 'renewed-holds', 'renewed-lapses', 'holder-runs', 'holder-horizon-ends',
        'holder-dead', 'other-run', 'other-boot-lease', 'wall-only-lease', 'deadline-holds', 'deadline-first',
        'no-idle-holds', 'no-idle-deadline'])
def test_the_watcher_acts_at_the_first_bound_that_passed_on_the_boot_clock_whatever_the_wall_clock_says(
        state, document, now, bound, wall_step):
    assert _lease.due(state, document, boot_at(now, wall_step), alive) == bound


@pytest.mark.parametrize('state, now, bound', [
    # Rebooted: the boot clock counts from 0 again, every step of the run is gone. Due at once, whichever bound.
    (ARMED, boot_at(5.0, boot_id='boot-2'), 'idle'),
    (dict(ARMED, idle=None), boot_at(5.0, boot_id='boot-2'), 'deadline'),
    # Without a boot id (a kernel that does not give one), a boot clock behind the arm's is another boot too.
    (dict(ARMED, boot_id=None), boot_at(5.0, boot_id=None), 'idle'),
    (dict(ARMED, boot_id=None), boot_at(1050.0, boot_id=None), None),
], ids=['rebooted', 'rebooted-no-idle', 'clock-behind-the-arm', 'same-boot-no-id'])
def test_a_guard_armed_in_another_boot_is_due_at_once(state, now, bound):
    assert _lease.due(state, lease(), now, alive) == bound


@pytest.mark.parametrize('document, now, bound', [
    (None, 1089.9, None),
    (None, 1090.0, 'idle'),
    (wall_lease(), 1189.9, None),
    (wall_lease(holder={'alive': True}, held_until=1500.0), 1400.0, None),
    (wall_lease(), 1190.0, 'idle'),
    (wall_lease(expires_at=3000.0), 2800.0, 'deadline'),
], ids=['arm-holds', 'arm-lapses', 'renewed-holds', 'holder-runs', 'renewed-lapses', 'deadline'])
def test_a_guard_armed_by_an_earlier_release_is_read_on_the_wall_clock_as_that_release_reads_it(document, now,
                                                                                                bound):
    # Its watcher is that release's code (installed in lib/ at its arm); the query and a renewal read it alike.
    assert _lease.due(ARMED_ON_WALL, document, _lease.Instant(now, 7.0, 'boot-9'), alive) == bound


@pytest.mark.parametrize('holder, horizon, expires, held_until', [
    (None, 0, 1190.0, None),
    # Nobody runs on (a step's last renewal): the next step's time counts by the clock alone.
    (None, 60, 1250.0, None),
    ({'pid': 1, 'start_time': 2}, 60, 1190.0, 1250.0),
])
def test_a_renewal_gives_the_idle_bound_and_the_horizon_only_while_its_holder_runs(holder, horizon, expires,
                                                                                   held_until):
    document = _lease.lease_document('run-1', 'a step', boot_at(1100.0), horizon, 90, holder)
    assert document['expires_at_boot'] == expires and document['held_until_boot'] == held_until
    assert document['renewed_at_boot'] == 1100.0 and document['boot_id'] == 'boot-1'
    # The same times on the wall clock, for display (and for a watcher of an earlier release).
    assert document['expires_at'] == WALL_AT_BOOT + expires and document['renewed_at'] == WALL_AT_BOOT + 1100.0
    assert document['held_until'] == (None if held_until is None else WALL_AT_BOOT + held_until)
    assert document['by'] == 'a step' and document['holder'] == holder


def write_state(folder, **state):
    (folder / 'state.json').write_text(json.dumps(dict(ARMED, **state)))


def test_renew_writes_the_lease_of_the_armed_run(tmp_path):
    write_state(tmp_path)
    written = _lease.renew(str(tmp_path), 'run-1', 'sglang_server restarted', 5, clock=SteppedClock(1200.0))
    assert written == _lease.read_lease(str(tmp_path))
    assert written['expires_at_boot'] == 1295.0 and written['by'] == 'sglang_server restarted'
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


@pytest.mark.parametrize('wall_step', [0.0, -3600.0, 3600.0], ids=['wall-kept', 'wall-stepped-back',
                                                                   'wall-stepped-forward'])
def test_the_renewer_renews_at_most_every_few_seconds_while_a_wait_polls(tmp_path, wall_step):
    write_state(tmp_path)
    clock = SteppedClock(1100.0)
    # Stepped while the wait polls: counted on the wall clock, a step back stopped the renewals for an hour.
    clock.step_wall(1100.5, wall_step)
    renewer = _lease.Renewer(str(tmp_path), 'run-1', 'sglang_server restarted', clock=clock, after=30,
                             holder={'pid': 1, 'start_time': 2})
    renewer.renew(60)
    for dummy in range(7):
        clock.sleep(0.25)
        renewer.tick(5)
    assert renewer.renewals == 1
    clock.sleep(2.0)
    renewer.tick(5)
    assert renewer.renewals == 2 and _lease.read_lease(str(tmp_path))['held_until_boot'] == clock.boot() + 5 + 90
    renewer.done()
    last = _lease.read_lease(str(tmp_path))
    assert last['holder'] is None and last['expires_at_boot'] == clock.boot() + 30 + 90
    assert last['by'] == 'sglang_server restarted (done)'


def test_without_a_guard_the_renewer_does_nothing():
    renewer = _lease.Renewer.from_option(None, 'gpu_release')
    assert renewer.renew(60) is None and renewer.done() is None
    renewer.tick()
    assert renewer.renewals == 0


def test_the_query_describes_the_lease_of_the_armed_guard():
    assert _lease.describe(None, None) is None
    described = _lease.describe(ARMED, lease(), alive, now=boot_at(1150.0))
    assert described == {
        'armed_at': WALL_AT_BOOT + 1000.0, 'idle': 90.0, 'renewed_at': WALL_AT_BOOT + 1100.0, 'renewed_by': 'a step',
        'deadline_at': WALL_AT_BOOT + 2800.0, 'expires_at': WALL_AT_BOOT + 1190.0, 'acts_at': WALL_AT_BOOT + 1190.0,
        'acts_in': 40.0, 'boot_id': 'boot-1', 'armed_at_boot': 1000.0, 'renewed_at_boot': 1100.0,
        'deadline_at_boot': 2800.0, 'expires_at_boot': 1190.0, 'acts_at_boot': 1190.0}


def test_the_query_places_the_times_to_come_on_the_wall_clock_as_it_reads_now():
    # The wall clock stepped back an hour since the renewal: the guard still acts 40 s from now, and says so.
    described = _lease.describe(ARMED, lease(), alive, now=boot_at(1150.0, wall_step=-3600.0))
    assert described['acts_in'] == 40.0 and described['acts_at_boot'] == 1190.0
    assert described['acts_at'] == WALL_AT_BOOT + 1190.0 - 3600.0
    assert described['deadline_at'] == WALL_AT_BOOT + 2800.0 - 3600.0
    # What the wall clock said when it happened stays as it was.
    assert described['armed_at'] == WALL_AT_BOOT + 1000.0 and described['renewed_at'] == WALL_AT_BOOT + 1100.0


def test_the_query_of_a_guard_armed_before_a_reboot_says_it_acts_now():
    now = boot_at(5.0, boot_id='boot-2')
    described = _lease.describe(ARMED, lease(), alive, now=now)
    assert described['acts_in'] == 0.0 and described['acts_at'] == now.wall and described['acts_at_boot'] is None
    assert described['boot_id'] == 'boot-1'


def test_the_query_of_a_guard_armed_by_an_earlier_release_shows_its_wall_clock_times():
    described = _lease.describe(ARMED_ON_WALL, wall_lease(), alive, now=_lease.Instant(1150.0, 7.0, 'boot-9'))
    assert (described['expires_at'], described['deadline_at'], described['acts_at']) == (1190.0, 2800.0, 1190.0)
    assert described['acts_in'] == 40.0 and described['expires_at_boot'] is None and described['boot_id'] is None


def test_a_renewal_of_a_guard_armed_before_a_reboot_is_refused_and_writes_nothing(tmp_path):
    write_state(tmp_path)
    clock = SteppedClock(5.0, boot_id='boot-2')
    with pytest.raises(_lease.LeaseError, match='the host restarted since the rollback guard of run run-1 .* was '
                                                'armed .boot boot-1, now boot-2.'):
        _lease.renew(str(tmp_path), 'run-1', 'sglang_patch', clock=clock)
    assert not (tmp_path / 'lease.json').exists()


def test_the_host_clock_reads_the_boot_clock_and_this_boot():
    now = _lease.HOST_CLOCK.now()
    with open('/proc/sys/kernel/random/boot_id') as handle:
        assert now.boot_id == handle.read().strip()
    # The boot clock counts since the boot, never since the epoch; the two clocks are read together.
    assert 0 < now.boot < now.wall and now.boot <= _lease.boot_seconds()
    assert _lease.read_boot_id('/nonexistent/boot_id') is None


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


@pytest.mark.parametrize('horizon', [_lease.MOST_DEADLINE_S + 1, 1e12, float('nan'), float('inf')],
                         ids=['just-over', '1e12', 'nan', 'inf'])
def test_a_renewal_past_the_longest_a_guard_may_hold_a_host_is_refused_and_writes_nothing(tmp_path, horizon):
    write_state(tmp_path)
    with pytest.raises(_lease.LeaseError) as refused:
        _lease.renew(str(tmp_path), 'run-1', 'sglang_benchmark', horizon, clock=SteppedClock(1200.0))
    assert str(refused.value).startswith('sglang_benchmark asked the rollback guard of run run-1 in %s to hold the host'
                                         ' for %g s more, beyond the 172800 s a guard may keep a host off its previous'
                                         ' server: nothing was renewed' % (tmp_path, horizon))
    assert not (tmp_path / 'lease.json').exists()
    at_most = _lease.renew(str(tmp_path), 'run-1', 'sglang_benchmark', _lease.MOST_DEADLINE_S, clock=SteppedClock(1200.0))
    assert at_most['expires_at_boot'] == 1200.0 + _lease.MOST_DEADLINE_S + 90


@pytest.mark.parametrize('after', [1e12, float('nan'), -1.0], ids=['1e12', 'nan', 'negative'])
def test_a_step_handed_over_past_the_maximum_is_refused_at_its_first_renewal_before_it_acts(tmp_path, after):
    write_state(tmp_path)
    renewer = _lease.Renewer.from_option({'folder': str(tmp_path), 'run_id': 'run-1', 'after': after},
                                         'sglang_server stopped')
    with pytest.raises(_lease.LeaseError) as refused:
        renewer.renew(60)
    assert str(refused.value).startswith('after (%g s) must be from 0 to 172800 s' % after), refused.value
    assert not (tmp_path / 'lease.json').exists() and renewer.renewals == 0


@pytest.mark.parametrize('bounds, problem', [
    ((1800, 90, 30), ''),
    ((_lease.MOST_DEADLINE_S, _lease.MOST_IDLE_S, _lease.MOST_DEADLINE_S), ''),
    ((1e12, 90, 0), 'deadline (1e+12 s) must be above 0 and at most 172800 s'),
    ((float('nan'), 90, 0), 'deadline (nan s) must be above 0 and at most 172800 s'),
    ((0, 90, 0), 'deadline (0 s) must be above 0 and at most 172800 s'),
    ((1800, 1e12, 0), 'idle (1e+12 s) must be from 0 to 3600 s (the longest a host may stay down once nothing of'
                      ' its run renews the guard)'),
    ((1800, None, float('inf')), 'after (inf s) must be from 0 to 172800 s'),
], ids=['usual', 'at-the-maxima', 'deadline-1e12', 'deadline-nan', 'deadline-0', 'idle-1e12', 'after-inf'])
def test_the_bounds_a_guard_is_armed_with_are_held_to_the_maxima_on_the_host(bounds, problem):
    found = _lease.arm_problem(*bounds)
    assert found.startswith(problem) and bool(found) is bool(problem), found


def test_a_renewer_whose_controller_is_gone_renews_nothing_from_then_on(tmp_path):
    write_state(tmp_path)
    clock = SteppedClock(1100.0)
    controller = {'gone': False}
    renewer = _lease.Renewer(str(tmp_path), 'run-1', 'sglang_server restarted', clock=clock,
                             holder={'pid': 1, 'start_time': 2}, gone=lambda: controller['gone'])
    renewer.renew(60)
    kept = _lease.read_lease(str(tmp_path))
    controller['gone'] = True
    clock.sleep(2.0)
    for renew in (lambda: renewer.tick(5), lambda: renewer.renew(60), renewer.done):
        with pytest.raises(_lease.LeaseError) as refused:
            renew()
        assert str(refused.value).startswith('the controller of this run is gone'), refused.value
        assert 'restores the previous server once its idle bound passes' in str(refused.value)
    # The lease is as the last renewal left it: the watcher counts the idle bound from there.
    assert _lease.read_lease(str(tmp_path)) == kept and renewer.renewals == 1


def test_a_module_renewer_asks_whether_its_stdout_reader_is_gone(tmp_path, monkeypatch):
    write_state(tmp_path)
    monkeypatch.setattr(_lease, 'controller_gone', lambda: True)
    renewer = _lease.Renewer.from_option({'folder': str(tmp_path), 'run_id': 'run-1'}, 'gpu_release')
    with pytest.raises(_lease.LeaseError):
        renewer.renew(60)
    assert not (tmp_path / 'lease.json').exists()
    # Without a guard there is nothing to renew, and nothing to refuse.
    assert _lease.Renewer.from_option(None, 'gpu_release').renew(60) is None
