# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollback guard's lease: the run's steps renew it on the host; the watcher acts when it lapses.

A guard armed with an idle bound restores when nothing of its run renewed the lease for that many
seconds, or at its deadline, whichever comes first: a dead controller costs the idle bound, not the
deadline, and a slow model load (its health wait renews on every poll) never triggers it.

lease.json in the guard folder: run_id, renewed_at, by (the step), expires_at, and while a step runs,
holder (its process: PID and start time) and held_until. A step renews at its start with a horizon
covering its own bounded work (the stop, the release, the patch), and long waits renew as they poll.
expires_at = now + idle; held_until = now + horizon + idle. While the holder runs the lease lasts until
held_until; once it is gone (it finished, or it died with its ssh session when the controller was
killed) only expires_at counts, so a dead controller costs the idle bound, not the step's worst case.
The step's last renewal (done) drops the holder: the idle bound from then (plus `after`, for a next
step that runs elsewhere and cannot renew) covers the controller's gap until the next step starts.

Every bound is measured on the host's boot clock (CLOCK_BOOTTIME: never stepped by NTP or `date -s`, and it
counts a suspend, as the controller's own time does; CLOCK_MONOTONIC where it does not exist), by the arm, the
renewals and the watcher alike, never on the wall clock: a step of +3600 s once made the watcher roll back a
live run after 1 s, and one of -3600 s made a dead controller cost an hour and moved the deadline. Each
reading of it is kept beside the boot it belongs to (/proc/sys/kernel/random/boot_id): the clock restarts at
a reboot, so a guard armed in another boot is due at once (every step of its run, and its watcher, died with
that boot), and a renewal there is refused. Wall-clock times (renewed_at, expires_at...) are written beside
the boot-clock ones (renewed_at_boot, expires_at_boot...) for display, and for a watcher of an earlier
release, which reads only those. A guard armed by an earlier release (no boot-clock readings in state.json)
is read on the wall clock, as that release reads it. Readings never leave the host: the controller hands
over durations only (deadline, idle, after).

Domain layer, standard library plus _files, _controller and _procfs: imported by the modules and by the guard's
watcher in lib/.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import namedtuple
from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.module_utils.base._controller import GONE_MESSAGE, controller_gone
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import FileLock, LockTimeout, read_json, write_atomic
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import read_proc_record

LEASE_FILE = 'lease.json'
STATE_FILE = 'state.json'
LOCK_FILE = 'lock'
# The health wait polls every 0.25 s: one fsync'ed write every few seconds is enough for a bound of a minute.
RENEW_EVERY = 2.0
# An arm or a confirm holds the guard's lock for seconds; a restore for minutes. A renewal that cannot get it
# within this is refused: whatever holds it that long is the restore, and the run must not act under it.
RENEW_LOCK_TIMEOUT = 10.0
# The longest a guard may keep a host off its previous server (its deadline; any step's hand-over `after` or
# horizon lies within it) and the longest a host stays down once nothing of its run renews (the idle bound): the
# role's sglang_rollback_deadline and sglang_rollback_idle maxima, whose table (plugin_utils/_timing.TIME_BOUNDS)
# reads these numbers. Checked again on the host: a value past the plan (a module called by hand, another
# release's role) would otherwise leave the host down for as long as it says, and a NaN deadline never passes.
MOST_DEADLINE_S = 2 * 86400.0
MOST_IDLE_S = 3600.0


BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id'
# Python 3.7+ on Linux; elsewhere the monotonic clock, which stops during a suspend (a longer lease, never a shorter).
BOOT_CLOCK = getattr(time, 'CLOCK_BOOTTIME', None)

# One reading of the host's clocks: wall (seconds since the epoch, for display), boot (the bounds) and the boot
# that the boot clock counts from (None where the kernel does not say).
Instant = namedtuple('Instant', 'wall boot boot_id')


def boot_seconds() -> float:
    """Seconds on the host's boot clock."""
    if BOOT_CLOCK is not None:
        return time.clock_gettime(BOOT_CLOCK)
    return time.monotonic()


def read_boot_id(path: str = BOOT_ID_FILE) -> str | None:
    """This boot's id (changes at every boot); None where it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


class HostClock:
    """The clocks a guard reads, injectable as a whole: tests step `wall` while `boot` runs on."""

    def __init__(self, wall: Callable = time.time, boot: Callable = boot_seconds,
                 boot_id: Callable = read_boot_id) -> None:
        self.wall, self.boot, self.boot_id = wall, boot, boot_id

    def now(self) -> Instant:
        return Instant(self.wall(), self.boot(), self.boot_id())


HOST_CLOCK = HostClock()


class LeaseError(Exception):
    """The lease could not be renewed: the guard is not this run's any more (it restored, or another run's)."""


def _read(path: str) -> Any:
    try:
        return read_json(path)
    except ValueError:
        return None


def read_lease(folder: str) -> dict[str, Any] | None:
    return _read(os.path.join(folder, LEASE_FILE))


def duration_problem(name: str, seconds: float, most: float, above_zero: bool = False) -> str:
    """Why `seconds` cannot be the guard's `name` ('' when it can): it must be a finite number of seconds from 0
    (above 0 with above_zero) to `most`. NaN compares false with every bound, so it is refused by the shape of the
    test: a NaN deadline would never pass."""
    value = float(seconds)
    if (value > 0 if above_zero else value >= 0) and value <= most:
        return ''
    return '%s (%g s) must be %s %g s (%s)' % (
        name, value, 'above 0 and at most' if above_zero else 'from 0 to', most,
        'the longest a rollback guard may keep a host off its previous server' if most == MOST_DEADLINE_S
        else 'the longest a host may stay down once nothing of its run renews the guard')


def arm_problem(deadline_s: float, idle_s: float | None = None, after_s: float = 0.0) -> str:
    """Why a guard cannot be armed with these bounds ('' when it can): the deadline above 0 and at most
    MOST_DEADLINE_S, the idle bound (None or 0: no lease) at most MOST_IDLE_S, the arm's hand-over within the
    deadline's maximum."""
    problems = [duration_problem('deadline', deadline_s, MOST_DEADLINE_S, above_zero=True),
                duration_problem('idle', 0.0 if idle_s is None else idle_s, MOST_IDLE_S),
                duration_problem('after', after_s or 0.0, MOST_DEADLINE_S)]
    return '; '.join(problem for problem in problems if problem)


def lease_document(run_id: str, step: str, now: Instant, horizon_s: float, idle_s: float,
                   holder: dict[str, int] | None = None) -> dict[str, Any]:
    """What lease.json holds after a renewal at `now` (an Instant; pure). holder: {pid, start_time} of the step
    still running. Each time is written twice: on the wall clock (display) and on the boot clock (the bounds)."""
    document = {'run_id': run_id, 'by': step, 'holder': holder, 'boot_id': now.boot_id}
    idle = float(idle_s)
    horizon = max(float(horizon_s), 0.0) + idle
    for suffix, reading in (('', now.wall), ('_boot', now.boot)):
        document['renewed_at' + suffix] = reading
        if holder is None:
            # Nobody runs on: the horizon (the next step's, elsewhere) counts by time alone.
            document['expires_at' + suffix], document['held_until' + suffix] = reading + horizon, None
        else:
            document['expires_at' + suffix], document['held_until' + suffix] = reading + idle, reading + horizon
    return document


def this_process(proc_root: str = '/proc') -> dict[str, int]:
    """{pid, start_time} of the running process, as the watcher will look for it."""
    record = read_proc_record(os.getpid(), proc_root)
    return {'pid': os.getpid(), 'start_time': record.start_time if record else None}


def holder_alive(holder: dict[str, Any], proc_root: str = '/proc') -> bool:
    """Whether the step that renewed still runs: the same PID and start time, not a zombie."""
    record = read_proc_record(holder['pid'], proc_root)
    return record is not None and record.start_time == holder.get('start_time') and record.state != 'Z'


def write_lease(folder: str, document: dict[str, Any]) -> None:
    write_atomic(os.path.join(folder, LEASE_FILE), json.dumps(document, sort_keys=True).encode('utf-8'), 0o600)


def restoring_message(state: dict[str, Any], folder: str, alive: Callable = holder_alive) -> str:
    """Why nothing of the run may act while state.json carries a restore's mark ('' without one)."""
    restorer = state.get('restoring')
    if not restorer:
        return ''
    who = 'pid %s (%s)' % (restorer.get('pid'), restorer.get('by'))
    if restorer.get('pid') and alive(restorer):
        return ('the rollback guard of run %s in %s is restoring the previous server (%s, since %s): nothing of the '
                'run may act on the tree or the server now; see fired.json there when it ends'
                % (state.get('run_id'), folder, who, restorer.get('at')))
    return ('a restore of the rollback guard of run %s in %s began (%s, at %s) and did not finish (its process is '
            'gone): the tree may be half restored; restore it again (playbooks/rollback.yml, or a later run takes '
            'it over) before anything else acts' % (state.get('run_id'), folder, who, restorer.get('at')))


def restoring_mark(acted_by: str, now: float, proc_root: str = '/proc') -> dict[str, Any]:
    """What state.json carries while a restore acts: who (this process) and since when."""
    mark = this_process(proc_root)
    mark.update(by=acted_by, at=now)
    return mark


def renew(folder: str, run_id: str, step: str, horizon_s: float = 0.0, clock: HostClock = HOST_CLOCK,
          holder: dict[str, int] | None = None, lock_timeout: float = RENEW_LOCK_TIMEOUT) -> dict[str, Any] | None:
    """Renew the lease of the guard run_id armed; LeaseError when that guard is not armed (any more), a
    restore holds it (running, or cut short and owed), or it was armed in another boot of the host.

    A guard armed without an idle bound (by an earlier version) has no lease: nothing to renew.
    Returns the lease written, or None.

    Under the guard's lock: a restore marks state.json and holds the lock while it acts, and the watcher checks
    the lease again under the lock before it acts. So either this renewal lands first (and the watcher, seeing
    it, does not act) or the restore does (and this renewal is refused): never a step acting during a restore.
    """
    if not math.isfinite(float(horizon_s)) or float(horizon_s) > MOST_DEADLINE_S:
        # A negative horizon counts as 0 (lease_document); one past the deadline's maximum is a bound gone wrong.
        raise LeaseError('%s asked the rollback guard of run %s in %s to hold the host for %s s more, beyond the %g s '
                         'a guard may keep a host off its previous server: nothing was renewed; lower the step\'s '
                         'timeouts or its `after` (sglang_plan\'s timing gives the role\'s)'
                         % (step, run_id, folder, '%g' % float(horizon_s), MOST_DEADLINE_S))
    _check(_read(os.path.join(folder, STATE_FILE)), folder, run_id)
    try:
        with FileLock(os.path.join(folder, LOCK_FILE), lock_timeout, max_interval=0.5):
            state = _check(_read(os.path.join(folder, STATE_FILE)), folder, run_id)
            if not state.get('idle'):
                return None
            now = clock.now()
            if armed_in_another_boot(state, now):
                raise LeaseError(rebooted_message(state, now, folder))
            document = lease_document(run_id, step, now, horizon_s, state['idle'], holder)
            write_lease(folder, document)
            return document
    except LockTimeout:
        raise LeaseError('the rollback guard of run %s in %s is held by another actor (its restore?) for over %gs: '
                         'nothing of the run may act now; see fired.json there' % (run_id, folder, lock_timeout))


def _check(state: Any, folder: str, run_id: str) -> dict[str, Any]:
    """The state when run_id may renew it; LeaseError saying why not."""
    if state is None or state.get('run_id') != run_id:
        raise LeaseError('the rollback guard of run %s is not armed in %s (armed: %s); it restored the previous '
                         'server or another run took it over, see fired.json there'
                         % (run_id, folder, state.get('run_id') if state else 'none'))
    if state.get('restore_failed'):
        # The watcher restored and could not write every file back: no step of the run may act on that tree.
        raise LeaseError('the rollback guard of run %s restored in %s and could not write back %s; nothing of the run '
                         'may go on, see fired.json there'
                         % (run_id, folder, ', '.join(state['restore_failed'].get('files') or []) or 'every file'))
    refusal = restoring_message(state, folder)
    if refusal:
        raise LeaseError(refusal)
    return state


def on_boot_clock(state: dict[str, Any]) -> bool:
    """Whether the guard keeps its bounds on the boot clock (armed by this release or a later one); a guard armed
    by an earlier release kept only wall-clock times, and is read on the wall clock."""
    return state.get('armed_at_boot') is not None


def armed_in_another_boot(state: dict[str, Any], now: Instant) -> bool:
    """Whether the guard was armed in a boot of the host before this one: its boot-clock readings mean nothing
    now. A boot-clock reading below the arm's can only come from another boot (where the boot id is unknown)."""
    if not on_boot_clock(state):
        return False
    return state.get('boot_id') != now.boot_id or now.boot < float(state['armed_at_boot'])


def rebooted_message(state: dict[str, Any], now: Instant, folder: str) -> str:
    return ('the host restarted since the rollback guard of run %s in %s was armed (boot %s, now %s): its lease '
            'lapsed with every step of the run, and its watcher is gone; restore it (playbooks/rollback.yml, or a '
            'later run takes it over) before anything else acts'
            % (state.get('run_id'), folder, state.get('boot_id'), now.boot_id))


def _suffix(state: dict[str, Any]) -> str:
    """Which of the readings kept twice count: the boot clock's ('_boot'), or the wall clock's ('')."""
    return '_boot' if on_boot_clock(state) else ''


def _reading(state: dict[str, Any], now: Instant) -> float:
    """`now` on the clock the guard's bounds are kept on."""
    return now.boot if on_boot_clock(state) else now.wall


def _renewal_of(state: dict[str, Any], lease: Any) -> bool:
    """Whether lease is a renewal of this guard that its clock can read: this run's, and (on the boot clock) made
    in the boot the guard was armed in, with boot-clock readings (a module of an earlier release wrote none)."""
    if lease is None or lease.get('run_id') != state.get('run_id'):
        return False
    if on_boot_clock(state):
        return lease.get('boot_id') == state.get('boot_id') and lease.get('expires_at_boot') is not None
    return True


def expiry(state: dict[str, Any], lease: Any, alive: Callable = holder_alive) -> float | None:
    """When the lease of this armed guard lapses (held_until while its holder runs, else expires_at), on the
    guard's clock (_reading); None without an idle bound (only the deadline counts). alive(holder) -> bool."""
    if not state.get('idle'):
        return None
    suffix = _suffix(state)
    if _renewal_of(state, lease):
        held_until = lease.get('held_until' + suffix)
        if lease.get('holder') and held_until and alive(lease['holder']):
            return float(held_until)
        return float(lease['expires_at' + suffix])
    # No renewal (yet) from this run: the arm itself counts as one.
    return float(state['armed_at' + suffix]) + float(state['idle'])


def deadline(state: dict[str, Any]) -> float:
    """The guard's deadline, on its clock."""
    return float(state['deadline' + _suffix(state)])


def deadline_passed(state: dict[str, Any], now: Instant) -> bool:
    """Whether the guard's deadline passed at `now` (at once for a guard armed in another boot)."""
    return armed_in_another_boot(state, now) or _reading(state, now) >= deadline(state)


def due(state: dict[str, Any], lease: Any, now: Instant, alive: Callable = holder_alive) -> str | None:
    """The bound that fired ('idle' or 'deadline') at `now` (an Instant), or None while neither has passed (pure
    but for alive). In another boot than the arm's, at once: the lease lapsed with the reboot."""
    if armed_in_another_boot(state, now):
        return 'idle' if state.get('idle') else 'deadline'
    expires = expiry(state, lease, alive)
    reading = _reading(state, now)
    if expires is not None and expires < deadline(state) and reading >= expires:
        return 'idle'
    if reading >= deadline(state):
        return 'deadline'
    return None


def acts_at(state: dict[str, Any], lease: dict[str, Any], alive: Callable = holder_alive) -> float:
    """When the watcher acts unless renewed or confirmed, on the guard's clock: the lease's expiry or the
    deadline, the earlier."""
    expires = expiry(state, lease, alive)
    return deadline(state) if expires is None else min(expires, deadline(state))


def describe(state: dict[str, Any] | None, lease: dict[str, Any] | None, alive: Callable = holder_alive,
             now: Instant | None = None) -> dict[str, Any] | None:
    """The guard's lease as the query reports it; None when no guard is armed.

    The times to come (expires_at, deadline_at, acts_at) are on the wall clock as it reads at `now` (their
    boot-clock readings carried over by now's offset), so a clock stepped since the arm does not make them lie;
    armed_at and renewed_at are as the wall clock said then. acts_in: seconds from now until the guard acts.
    """
    if state is None:
        return None
    now = HOST_CLOCK.now() if now is None else now
    renewed = lease if _renewal_of(state, lease) else None
    described = {
        'armed_at': state.get('armed_at'), 'idle': state.get('idle'), 'boot_id': state.get('boot_id'),
        'renewed_at': renewed['renewed_at'] if renewed else None, 'renewed_by': renewed['by'] if renewed else None,
        'armed_at_boot': state.get('armed_at_boot'),
        'renewed_at_boot': renewed.get('renewed_at_boot') if renewed else None,
    }
    if armed_in_another_boot(state, now):
        # Nothing of that boot's readings can be placed now: the guard is due.
        described.update(expires_at=now.wall if state.get('idle') else None, deadline_at=state.get('deadline'),
                         acts_at=now.wall, expires_at_boot=None, deadline_at_boot=None, acts_at_boot=None,
                         acts_in=0.0)
        return described
    reading = _reading(state, now)
    times = {'expires_at': expiry(state, lease, alive), 'deadline_at': deadline(state),
             'acts_at': acts_at(state, lease, alive)}
    for name, at in times.items():
        if on_boot_clock(state):
            described[name], described[name + '_boot'] = None if at is None else now.wall + (at - reading), at
        else:
            described[name], described[name + '_boot'] = at, None
    described['acts_in'] = max(0.0, times['acts_at'] - reading)
    return described


# The modules' guard option (doc fragment gpuops.sglang.guard_lease).
GUARD_OPTION = dict(type='dict', options=dict(
    folder=dict(type='path', required=True),
    run_id=dict(type='str', required=True),
    after=dict(type='float', default=0),
))


def _never() -> bool:
    return False


class Renewer:
    """A module's hold on the lease: renew at a step's start, and as a long wait polls (at most every few s).

    Without a guard (folder None) every call does nothing: the modules work the same outside a window.

    A module whose controller is gone (`gone`, base._controller) renews nothing: every renewal raises LeaseError, so
    the step in flight ends there and the guard's idle bound counts from its last renewal. Before, a start cut off
    with its controller went on renewing through the new server's load and the guard restored only after that
    second outage (docs/benchmarks.md, issue 45).
    """

    def __init__(self, folder: str | None = None, run_id: str | None = None, step: str = '',
                 clock: HostClock = HOST_CLOCK, every: float = RENEW_EVERY, after: float = 0.0,
                 holder: dict[str, int] | None = None, gone: Callable[[], bool] = _never) -> None:
        self.folder, self.run_id, self.step, self.after = folder, run_id, step, float(after or 0)
        self.clock, self.every = clock, every
        self.holder = holder
        self.gone = gone
        self.last = None
        self.renewals = 0

    @classmethod
    def from_option(cls, option: dict[str, Any] | None, step: str, gone: Callable[[], bool] | None = None) -> Renewer:
        """From a module's guard option (folder, run_id); a Renewer that does nothing when it is None. A module's
        renewals stop once its controller is gone (`gone`, by default its stdout's reader closed)."""
        if not option:
            return cls(step=step)
        return cls(option['folder'], option['run_id'], step, after=option.get('after') or 0, holder=this_process(),
                   gone=gone or controller_gone)

    def renew(self, horizon_s: float = 0.0, step: str | None = None, holder: bool = True) -> dict[str, Any] | None:
        """Hold the lease for horizon_s more while this process runs (the idle bound after it is gone)."""
        if self.folder is None:
            return None
        if duration_problem('after', self.after, MOST_DEADLINE_S):
            # Checked at every renewal, the first at the step's start: refused before the step acts, not at its end.
            raise LeaseError('%s: the guard option of %s (run %s in %s) is refused; nothing was renewed'
                             % (duration_problem('after', self.after, MOST_DEADLINE_S), self.step, self.run_id,
                                self.folder))
        if self.gone():
            raise LeaseError('%s: %s renewed nothing and stops here; the rollback guard of run %s in %s restores the '
                             'previous server once its idle bound passes, unless another run takes it over first'
                             % (GONE_MESSAGE, step or self.step, self.run_id, self.folder))
        lease = renew(self.folder, self.run_id, step or self.step, horizon_s, self.clock,
                      self.holder if holder else None)
        # The boot clock: a wall clock stepped back would stop the renewals of a long wait for the step's size.
        self.last = self.clock.boot()
        self.renewals += 1
        return lease

    def tick(self, horizon_s: float = 0.0) -> None:
        """Renew when the last renewal is RENEW_EVERY old: called before every read of a wait that may
        take up to horizon_s."""
        if self.folder is not None and (self.last is None or self.clock.boot() - self.last >= self.every):
            self.renew(horizon_s, '%s (waiting)' % self.step)

    def done(self, handed_over: bool = True) -> dict[str, Any] | None:
        """The step's last renewal: the idle bound from now, plus `after` when the next step cannot renew."""
        return self.renew(self.after if handed_over else 0.0, '%s (done)' % self.step, holder=False)
