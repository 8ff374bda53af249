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

Domain layer, standard library plus _files and _procfs: imported by the modules and by the guard's
watcher in lib/.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.gpuops.sglang.plugins.module_utils._files import FileLock, LockTimeout, read_json, write_atomic
from ansible_collections.gpuops.sglang.plugins.module_utils._procfs import read_proc_record

LEASE_FILE = 'lease.json'
STATE_FILE = 'state.json'
LOCK_FILE = 'lock'
# The health wait polls every 0.25 s: one fsync'ed write every few seconds is enough for a bound of a minute.
RENEW_EVERY = 2.0
# An arm or a confirm holds the guard's lock for seconds; a restore for minutes. A renewal that cannot get it
# within this is refused: whatever holds it that long is the restore, and the run must not act under it.
RENEW_LOCK_TIMEOUT = 10.0


class LeaseError(Exception):
    """The lease could not be renewed: the guard is not this run's any more (it restored, or another run's)."""


def _read(path):
    try:
        return read_json(path)
    except ValueError:
        return None


def read_lease(folder):
    return _read(os.path.join(folder, LEASE_FILE))


def lease_document(run_id, step, now, horizon_s, idle_s, holder=None):
    """What lease.json holds after a renewal (pure). holder: {pid, start_time} of the step still running."""
    document = {'run_id': run_id, 'by': step, 'renewed_at': now, 'expires_at': now + float(idle_s),
                'holder': holder, 'held_until': None}
    horizon = now + max(float(horizon_s), 0.0) + float(idle_s)
    if holder is None:
        # Nobody runs on: the horizon (the next step's, elsewhere) counts by time alone.
        document['expires_at'] = horizon
    else:
        document['held_until'] = horizon
    return document


def this_process(proc_root='/proc'):
    """{pid, start_time} of the running process, as the watcher will look for it."""
    record = read_proc_record(os.getpid(), proc_root)
    return {'pid': os.getpid(), 'start_time': record.start_time if record else None}


def holder_alive(holder, proc_root='/proc'):
    """Whether the step that renewed still runs: the same PID and start time, not a zombie."""
    record = read_proc_record(holder['pid'], proc_root)
    return record is not None and record.start_time == holder.get('start_time') and record.state != 'Z'


def write_lease(folder, document):
    write_atomic(os.path.join(folder, LEASE_FILE), json.dumps(document, sort_keys=True).encode('utf-8'), 0o600)


def restoring_message(state, folder, alive=holder_alive):
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


def restoring_mark(acted_by, now, proc_root='/proc'):
    """What state.json carries while a restore acts: who (this process) and since when."""
    mark = this_process(proc_root)
    mark.update(by=acted_by, at=now)
    return mark


def renew(folder, run_id, step, horizon_s=0.0, clock=time.time, holder=None, lock_timeout=RENEW_LOCK_TIMEOUT):
    """Renew the lease of the guard run_id armed; LeaseError when that guard is not armed (any more), or a
    restore holds it (running, or cut short and owed).

    A guard armed without an idle bound (by an earlier version) has no lease: nothing to renew.
    Returns the lease written, or None.

    Under the guard's lock: a restore marks state.json and holds the lock while it acts, and the watcher checks
    the lease again under the lock before it acts. So either this renewal lands first (and the watcher, seeing
    it, does not act) or the restore does (and this renewal is refused): never a step acting during a restore.
    """
    _check(_read(os.path.join(folder, STATE_FILE)), folder, run_id)
    try:
        with FileLock(os.path.join(folder, LOCK_FILE), lock_timeout, max_interval=0.5):
            state = _check(_read(os.path.join(folder, STATE_FILE)), folder, run_id)
            if not state.get('idle'):
                return None
            document = lease_document(run_id, step, clock(), horizon_s, state['idle'], holder)
            write_lease(folder, document)
            return document
    except LockTimeout:
        raise LeaseError('the rollback guard of run %s in %s is held by another actor (its restore?) for over %gs: '
                         'nothing of the run may act now; see fired.json there' % (run_id, folder, lock_timeout))


def _check(state, folder, run_id):
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


def expiry(state, lease, alive=holder_alive):
    """When the lease of this armed guard lapses (held_until while its holder runs, else expires_at); None
    without an idle bound (only the deadline counts). alive(holder) -> bool."""
    if not state.get('idle'):
        return None
    if lease is not None and lease.get('run_id') == state.get('run_id'):
        if lease.get('holder') and lease.get('held_until') and alive(lease['holder']):
            return float(lease['held_until'])
        return float(lease['expires_at'])
    # No renewal (yet) from this run: the arm itself counts as one.
    return float(state['armed_at']) + float(state['idle'])


def due(state, lease, now, alive=holder_alive):
    """The bound that fired ('idle' or 'deadline'), or None while neither has passed (pure but for alive)."""
    expires = expiry(state, lease, alive)
    deadline = float(state['deadline'])
    if expires is not None and expires < deadline and now >= expires:
        return 'idle'
    if now >= deadline:
        return 'deadline'
    return None


def acts_at(state, lease, alive=holder_alive):
    """When the watcher acts unless renewed or confirmed: the lease's expiry or the deadline, the earlier."""
    expires = expiry(state, lease, alive)
    deadline = float(state['deadline'])
    return deadline if expires is None else min(expires, deadline)


def describe(state, lease, alive=holder_alive):
    """The guard's lease as the query reports it; None when no guard is armed."""
    if state is None:
        return None
    renewed = lease if lease is not None and lease.get('run_id') == state.get('run_id') else None
    return {
        'armed_at': state.get('armed_at'), 'idle': state.get('idle'), 'deadline_at': state.get('deadline'),
        'renewed_at': renewed['renewed_at'] if renewed else None, 'renewed_by': renewed['by'] if renewed else None,
        'expires_at': expiry(state, lease, alive), 'acts_at': acts_at(state, lease, alive),
    }


# The modules' guard option (doc fragment gpuops.sglang.guard_lease).
GUARD_OPTION = dict(type='dict', options=dict(
    folder=dict(type='path', required=True),
    run_id=dict(type='str', required=True),
    after=dict(type='float', default=0),
))


class Renewer(object):
    """A module's hold on the lease: renew at a step's start, and as a long wait polls (at most every few s).

    Without a guard (folder None) every call does nothing: the modules work the same outside a window.
    """

    def __init__(self, folder=None, run_id=None, step='', clock=time.time, every=RENEW_EVERY, after=0.0,
                 holder=None):
        self.folder, self.run_id, self.step, self.after = folder, run_id, step, float(after or 0)
        self.clock, self.every = clock, every
        self.holder = holder
        self.last = None
        self.renewals = 0

    @classmethod
    def from_option(cls, option, step):
        """From a module's guard option (folder, run_id); a Renewer that does nothing when it is None."""
        if not option:
            return cls(step=step)
        return cls(option['folder'], option['run_id'], step, after=option.get('after') or 0, holder=this_process())

    def renew(self, horizon_s=0.0, step=None, holder=True):
        """Hold the lease for horizon_s more while this process runs (the idle bound after it is gone)."""
        if self.folder is None:
            return None
        lease = renew(self.folder, self.run_id, step or self.step, horizon_s, self.clock,
                      self.holder if holder else None)
        self.last = self.clock()
        self.renewals += 1
        return lease

    def tick(self, horizon_s=0.0):
        """Renew when the last renewal is RENEW_EVERY old: called before every read of a wait that may
        take up to horizon_s."""
        if self.folder is not None and (self.last is None or self.clock() - self.last >= self.every):
            self.renew(horizon_s, '%s (waiting)' % self.step)

    def done(self, handed_over=True):
        """The step's last renewal: the idle bound from now, plus `after` when the next step cannot renew."""
        return self.renew(self.after if handed_over else 0.0, '%s (done)' % self.step, holder=False)
