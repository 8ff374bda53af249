"""The guard's watcher counts its bounds on the host's boot clock: a wall clock stepped +3600 s or -3600 s (NTP
correcting a drifted host, `date -s`) neither fires it early on a live run nor keeps a dead run's host down.

The real watcher's loop (_watch_and_restore: watch, then the restore that checks the bounds again under the
lock), the real arm, renewals, confirm and restore on a trusted folder; only the server's stop and start are left
out of the restore, and the clocks are a SteppedClock: the boot clock runs as the watcher sleeps, the wall clock
with it, stepped once.
"""
from __future__ import annotations

import argparse
import json
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _lease
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import WATCH_INTERVAL, Guard, _watch_and_restore
from helpers.stepped_clock import SteppedClock, WaitedTooLong
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

ARMED_AT = 1000.0  # on the boot clock
IDLE = 60.0


class WatchedGuard(Guard):
    """A guard whose restore writes the files back and notes when (boot clock) it acted: no server to stop or
    start. Its watcher's systemd unit is not started (the test runs the watcher's loop itself)."""

    def __init__(self, folder: str, clock: SteppedClock):
        super().__init__(folder, runner=lambda argv, timeout: (0, '', ''), lock_timeout=5, clock=clock)
        self.acted_at: float | None = None

    def _carry_out(self, steps, state, outcome):
        self.acted_at = self.clock.boot()
        self._restore_files(steps, state['files'], outcome['files'])


def arm(folder, clock: SteppedClock, deadline: float, idle: float | None = IDLE) -> WatchedGuard:
    live = folder / 'live.conf'
    live.write_bytes(b'OLD')
    guard = WatchedGuard(str(folder / 'guard'), clock)
    guard.arm('run1', deadline, [str(live)], {'service_name': 'tiny'}, 'h', 'python3', {}, systemd=True,
              idle_s=idle)
    live.write_bytes(b'NEW')  # the run's new bytes
    return guard


def watch_and_restore(guard: WatchedGuard):
    args = argparse.Namespace(run_id='run1', folder=guard.folder, reason=None)
    return _watch_and_restore(guard, args, sleep=guard.clock.sleep)


def test_a_wall_clock_stepped_forward_never_fires_the_watcher_on_a_live_run(trusted_dir):
    clock = SteppedClock(ARMED_AT, limit=ARMED_AT + 600)
    guard = arm(trusted_dir, clock, deadline=1800)
    # One second after the arm the wall clock jumps an hour ahead: on the wall clock the lease lapsed long ago.
    clock.step_wall(ARMED_AT + 1, 3600.0)
    # The run goes on: a step renews within the idle bound, the next confirms the new server.
    clock.at(ARMED_AT + 40, lambda: _lease.renew(guard.folder, 'run1', 'sglang_server restarted', 30, clock=clock))
    clock.at(ARMED_AT + 120, lambda: Guard(guard.folder, clock=clock).confirm('run1'))
    assert watch_and_restore(guard) is None
    assert guard.acted_at is None, 'the watcher rolled back a live run %.1f s after the arm' % (
        guard.acted_at - ARMED_AT)
    assert (trusted_dir / 'live.conf').read_bytes() == b'NEW' and not (trusted_dir / 'guard' / 'fired.json').exists()


def test_a_wall_clock_stepped_back_costs_a_dead_controller_the_idle_bound_not_an_hour(trusted_dir):
    clock = SteppedClock(ARMED_AT, limit=ARMED_AT + 600)
    guard = arm(trusted_dir, clock, deadline=1800)
    clock.step_wall(ARMED_AT + 1, -3600.0)
    # Nothing renews after the arm: the controller died.
    report = watch_and_restore(guard)
    assert report['bound'] == 'idle' and report['acted_by'] == 'idle'
    assert ARMED_AT + IDLE <= guard.acted_at <= ARMED_AT + IDLE + WATCH_INTERVAL
    assert 'idle bound (60s)' in report['reason']
    assert (trusted_dir / 'live.conf').read_bytes() == b'OLD'


def test_a_wall_clock_stepped_back_does_not_move_the_deadline_of_a_run_that_keeps_renewing(trusted_dir):
    clock = SteppedClock(ARMED_AT, limit=ARMED_AT + 600)
    guard = arm(trusted_dir, clock, deadline=120)
    clock.step_wall(ARMED_AT + 1, -3600.0)
    # A step that never ends (a health wait that hangs) keeps the lease alive past the deadline, as its process runs.
    renewer = _lease.Renewer(guard.folder, 'run1', 'sglang_server restarted', clock=clock,
                             holder=_lease.this_process())
    renewer.renew(900)
    clock.on_every_sleep(lambda: renewer.tick(900))
    report = watch_and_restore(guard)
    assert report['bound'] == 'deadline' and 'within its deadline (120s after arming)' in report['reason']
    assert ARMED_AT + 120 <= guard.acted_at <= ARMED_AT + 120 + WATCH_INTERVAL
    assert renewer.renewals > 1, 'the run did not renew while the watcher waited'
    assert (trusted_dir / 'live.conf').read_bytes() == b'OLD'


def test_a_watcher_restarted_after_a_reboot_restores_on_its_first_poll(trusted_dir):
    clock = SteppedClock(ARMED_AT, limit=ARMED_AT + 600)
    guard = arm(trusted_dir, clock, deadline=1800)
    # The host restarted: its boot clock counts from 0 again, well below the arm's reading, under another boot id.
    clock.reboot(12.0, 'boot-2')
    report = watch_and_restore(guard)
    assert guard.acted_at == 12.0 and report['bound'] == 'idle'
    assert 'the host restarted since the guard was armed (boot boot-1, now boot-2)' in report['reason']
    assert (trusted_dir / 'live.conf').read_bytes() == b'OLD'


def test_the_arm_keeps_both_clocks_and_the_boot_beside_them(trusted_dir):
    clock = SteppedClock(ARMED_AT)
    guard = arm(trusted_dir, clock, deadline=1800)
    state = json.loads((trusted_dir / 'guard' / 'state.json').read_text())
    assert (state['boot_id'], state['armed_at_boot'], state['deadline_boot']) == ('boot-1', ARMED_AT, ARMED_AT + 1800)
    assert (state['armed_at'], state['deadline']) == (clock.wall(), clock.wall() + 1800)
    first = _lease.read_lease(guard.folder)
    assert first['by'] == 'arm the guard' and first['expires_at_boot'] == ARMED_AT + IDLE
    assert first['boot_id'] == 'boot-1' and first['expires_at'] == clock.wall() + IDLE
    assert oct(os.stat(guard.state_path).st_mode & 0o777) == '0o600'


def test_the_clock_limit_stops_a_watcher_that_waits_too_long(trusted_dir):
    # The stepped clock's own guard rail: what the tests above rely on to fail fast on a watcher that waits an hour.
    clock = SteppedClock(ARMED_AT, limit=ARMED_AT + 30)
    guard = arm(trusted_dir, clock, deadline=1800)
    with pytest.raises(WaitedTooLong):
        watch_and_restore(guard)
    assert guard.acted_at is None
