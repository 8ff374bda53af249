"""The restore's parts that must never let one failure hide or stop the rest: each file on its own, every
step's error caught (RecursionError included), a router step bounded in time."""
import hashlib
import threading

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import (
    BoundedStep, Guard, GuardError, RestoreSteps, process_uids)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import user_named


def entry(tmp_path, name, data, existed=True):
    backup = tmp_path / ('backup-' + name.replace('/', '-'))
    backup.write_bytes(data)
    return {'path': str(tmp_path / name), 'backup': str(backup), 'existed': existed, 'kind': 'file',
            'mode': 0o644, 'uid': 0, 'gid': 0, 'sha256': hashlib.sha256(data).hexdigest()}


def test_each_file_is_restored_on_its_own_and_a_failure_is_named(tmp_path):
    (tmp_path / 'same').write_bytes(b'same')
    (tmp_path / 'created').write_bytes(b'new')
    entries = [entry(tmp_path, 'gone/a.json', b'a'), entry(tmp_path, 'b.json', b'b'), entry(tmp_path, 'same', b'same'),
               dict(entry(tmp_path, 'created', b''), existed=False)]
    steps = RestoreSteps()
    outcomes = Guard._restore_files(steps, entries)
    assert [(item['path'].rsplit('/', 1)[1], item['outcome']) for item in outcomes] == [
        ('a.json', 'failed'), ('b.json', 'restored'), ('same', 'unchanged'), ('created', 'removed')]
    assert 'No such file or directory' in outcomes[0]['error'] and outcomes[1]['error'] is None
    assert (tmp_path / 'b.json').read_bytes() == b'b' and not (tmp_path / 'created').exists()
    assert 'restore the pre-run files' not in steps.done and 'gone/a.json' in steps.failed['restore the pre-run files']


def test_a_damaged_backup_fails_that_file_only(tmp_path):
    damaged = entry(tmp_path, 'x', b'x')
    damaged['sha256'] = '0' * 64
    outcomes = Guard._restore_files(RestoreSteps(), [damaged, entry(tmp_path, 'y', b'y')])
    assert [item['outcome'] for item in outcomes] == ['failed', 'restored']
    assert 'damaged' in outcomes[0]['error']


@pytest.mark.parametrize('error', [RecursionError('maximum recursion depth exceeded'), KeyError('id'),
                                   ValueError('bad'), OSError(28, 'No space left on device')])
def test_every_step_error_is_caught_and_the_next_step_runs(error):
    steps = RestoreSteps()

    def fail():
        raise error
    assert steps.run('take the server out of the router', fail) is None
    assert steps.run('stop the server that runs now', lambda: 'stopped') == 'stopped'
    assert steps.done == ['stop the server that runs now']
    assert steps.problems[0].startswith('take the server out of the router: ')
    assert set(steps.timings) == {'take the server out of the router', 'stop the server that runs now'}


def test_a_router_step_that_hangs_is_left_behind_after_its_bound():
    release = threading.Event()
    step = BoundedStep(release.wait, 0.2)
    with pytest.raises(GuardError, match='no outcome within 0.2s'):
        step.wait()
    assert step.running()
    release.set()
    step.thread.join(5)
    assert not step.running()


def test_a_bounded_step_hands_back_its_outcome_or_its_error():
    assert BoundedStep(lambda: 42, 5).wait() == 42

    def deep():
        raise RecursionError('maximum recursion depth exceeded while decoding a JSON array')
    with pytest.raises(RecursionError):
        BoundedStep(deep, 5).wait()


def test_a_process_owner_is_read_from_proc():
    import os
    assert process_uids(os.getpid()) == (os.getuid(), os.geteuid())
    assert process_uids(2 ** 22 + 1) is None
    assert user_named(0) == 'root' and user_named(2 ** 31 - 7) == str(2 ** 31 - 7)


# --- the restore holds the guard: no step of the run acts during it, a restore cut short is taken over -------

import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _lease  # noqa: E402
from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError  # noqa: E402
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import WATCH_INTERVAL, watch  # noqa: E402
from helpers.stepped_clock import WALL_AT_BOOT, SteppedClock  # noqa: E402
from helpers.trusted_folder import trusted_dir  # noqa: E402,F401  (the fixture)

GONE_PID = 2 ** 22 + 3


def armed_state(folder, live, data=b'OLD', **extra):
    """An armed guard in folder keeping data as live's pre-run bytes (live holds the run's NEW bytes)."""
    backups = folder / 'files'
    backups.mkdir(mode=0o700)
    (backups / '0').write_bytes(data)
    os.chmod(str(backups / '0'), 0o600)
    live.write_bytes(b'NEW')
    state = {'run_id': 'run1', 'host': 'h', 'armed_at': 1000.0, 'deadline': 2 ** 40, 'idle': 90.0,
             'files': [{'path': str(live), 'backup': str(backups / '0'), 'existed': True, 'kind': 'file', 'mode': 0o644,
                        'uid': 0, 'gid': 0, 'sha256': hashlib.sha256(data).hexdigest()}],
             'server': {'manager': 'detached', 'service_name': 'tiny', 'launch_file': '/nonexistent/launch.json',
                        'pidfile': str(folder / 'tiny.pid'), 'log_file': str(folder / 'tiny.log'),
                        'base_url': 'http://127.0.0.1:9'},
             'settings': {}, 'python': 'python3', 'watcher': 'detached', 'unit': 'gpuops-sglang-guard-tiny'}
    state.update(extra)
    (folder / 'state.json').write_text(json.dumps(state))
    os.chmod(str(folder / 'state.json'), 0o600)
    return state


class SlowGuard(Guard):
    """A restore whose actions (the stop, the files, the slow start of the previous server) wait for `go`."""

    def __init__(self, folder):
        super(SlowGuard, self).__init__(folder, lock_timeout=5)
        self.acting, self.go, self.carried_out = threading.Event(), threading.Event(), 0

    def _carry_out(self, steps, state, outcome):
        self.carried_out += 1
        self.acting.set()
        self.go.wait(30)
        self._restore_files(steps, state['files'], outcome['files'])


def test_no_step_of_the_run_renews_confirms_or_arms_while_the_watcher_restores(trusted_dir):
    armed_state(trusted_dir, trusted_dir / 'live.conf')
    guard = SlowGuard(str(trusted_dir))
    reports = []
    restorer = threading.Thread(target=lambda: reports.append(guard.restore('idle bound', 'idle', run_id='run1')))
    restorer.start()
    try:
        assert guard.acting.wait(10)
        with pytest.raises(_lease.LeaseError, match='is restoring the previous server'):
            _lease.renew(str(trusted_dir), 'run1', 'sglang_server activate', lock_timeout=0.2)
        assert not (trusted_dir / 'lease.json').exists()
        with pytest.raises(GuardError, match='holds .*lock'):
            Guard(str(trusted_dir), lock_timeout=0.2).confirm('run1')
    finally:
        guard.go.set()
        restorer.join(30)
    assert reports[0]['run_id'] == 'run1' and (trusted_dir / 'live.conf').read_bytes() == b'OLD'
    assert not (trusted_dir / 'state.json').exists()


def test_a_renewal_that_waits_for_the_lock_of_a_restore_is_refused(trusted_dir):
    armed_state(trusted_dir, trusted_dir / 'live.conf')
    # The lock held, no mark yet: the instant between the restore taking the lock and marking state.json.
    from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import FileLock
    with FileLock(str(trusted_dir / 'lock'), 1):
        with pytest.raises(_lease.LeaseError, match='held by another actor'):
            _lease.renew(str(trusted_dir), 'run1', 'sglang_patch', lock_timeout=0.2)
    assert not (trusted_dir / 'lease.json').exists()


def test_the_watcher_checks_the_bounds_again_under_the_lock_and_acts_on_nothing_when_the_run_renewed(trusted_dir):
    armed_state(trusted_dir, trusted_dir / 'live.conf', armed_at=1000.0)
    guard = SlowGuard(str(trusted_dir))
    guard.go.set()
    # The arm's idle bound lapsed long ago (the watcher saw it), then the run renewed before the watcher got the lock.
    _lease.renew(str(trusted_dir), 'run1', 'sglang_server activate', 60)
    assert guard.restore('idle bound', 'idle', run_id='run1', bound='idle', only_if_due=True) is None
    assert guard.carried_out == 0 and (trusted_dir / 'live.conf').read_bytes() == b'NEW'
    assert 'restoring' not in json.loads((trusted_dir / 'state.json').read_text())
    # Without the renewal it was due: the watcher restores.
    os.unlink(str(trusted_dir / 'lease.json'))
    assert guard.restore('idle bound', 'idle', run_id='run1', bound='idle', only_if_due=True)['bound'] == 'idle'
    assert guard.carried_out == 1 and (trusted_dir / 'live.conf').read_bytes() == b'OLD'


def test_a_restore_that_died_midway_blocks_the_run_and_the_next_restore_takes_it_over(trusted_dir):
    dead = {'pid': GONE_PID, 'start_time': 1, 'by': 'idle', 'at': 1500.0}
    armed_state(trusted_dir, trusted_dir / 'live.conf', restoring=dead)
    with pytest.raises(_lease.LeaseError, match='did not finish'):
        _lease.renew(str(trusted_dir), 'run1', 'sglang_patch')
    guard = SlowGuard(str(trusted_dir))
    guard.go.set()
    with pytest.raises(GuardError, match='did not finish'):
        guard.confirm('run1')
    with pytest.raises(GuardError, match='did not finish'):
        guard.arm('run2', 60, [], {'service_name': 'tiny'}, 'h', 'python3', {}, systemd=False)
    # rollback.yml (or a later run's takeover), and the watcher even though its bounds did not pass.
    report = guard.restore('taken over', 'takeover', only_if_due=True)
    assert report['acted_by'] == 'takeover' and 'took over the restore begun by pid %d' % GONE_PID in report['problems'][0]
    assert (trusted_dir / 'live.conf').read_bytes() == b'OLD' and not (trusted_dir / 'state.json').exists()


# --- a restore that stops before its files keeps the guard owed ------------------------------------------

def test_a_restore_that_stops_before_the_files_keeps_the_guard_owed_with_its_backups(trusted_dir):
    # A state armed by an older collection, without a key this one reads first.
    state = armed_state(trusted_dir, trusted_dir / 'live.conf')
    del state['settings']
    (trusted_dir / 'state.json').write_text(json.dumps(state))
    report = Guard(str(trusted_dir)).restore('the verify failed', 'controller', run_id='run1')
    assert report['status'] == 'failed' and report['files_handled'] is False
    assert [entry['path'] for entry in report['failed_files']] == [str(trusted_dir / 'live.conf')]
    assert any("KeyError: 'settings'" in problem for problem in report['problems'])
    assert any('stopped before it handled every file' in problem for problem in report['problems'])
    kept = json.loads((trusted_dir / 'state.json').read_text())
    assert kept['restore_failed']['files'] == [str(trusted_dir / 'live.conf')] and 'restoring' not in kept
    assert 'stopped before it handled every file' in kept['restore_failed']['why']
    assert (trusted_dir / 'files' / '0').read_bytes() == b'OLD'
    assert json.loads((trusted_dir / 'fired.json').read_text())['files_handled'] is False
    with pytest.raises(_lease.LeaseError, match='could not write back'):
        _lease.renew(str(trusted_dir), 'run1', 'sglang_patch')


# --- arm leaves no guard without a watcher ----------------------------------------------------------------

def test_an_arm_whose_watcher_cannot_start_leaves_no_guard_armed_whatever_the_error(trusted_dir):
    def runner(argv, timeout):
        raise CommandError('systemctl: timed out after 60s')
    guard = Guard(str(trusted_dir / 'guard'), runner=runner)
    with pytest.raises(CommandError):
        guard.arm('run1', 60, [], {'service_name': 'tiny'}, 'h', 'python3', {}, systemd=True, idle_s=90)
    assert guard.state() is None


# --- only a missing state means confirmed -------------------------------------------------------------------

class FlakyGuard(object):
    folder = '/nonexistent'
    state_path = '/nonexistent/state.json'

    def __init__(self, states):
        self.states = list(states)

    def state(self):
        item = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        if isinstance(item, Exception):
            raise item
        return item


# Armed at 0 s on the boot clock, with a deadline of 100 s and no idle bound.
DEADLINE_ONLY = {'run_id': 'run1', 'armed_at': WALL_AT_BOOT, 'deadline': WALL_AT_BOOT + 100.0, 'idle': None,
                 'boot_id': 'boot-1', 'armed_at_boot': 0.0, 'deadline_boot': 100.0}


def test_a_state_that_cannot_be_read_for_a_while_is_read_again_not_taken_for_confirmed():
    guard = FlakyGuard([OSError(errno.EIO, 'Input/output error'), OSError(errno.EMFILE, 'Too many open files'),
                        DEADLINE_ONLY])
    assert watch(guard, 'run1', clock=SteppedClock(100.0), sleep=lambda seconds: None) == 'deadline'
    assert watch(FlakyGuard([None]), 'run1', clock=SteppedClock(0.0), sleep=lambda seconds: None) is None


@pytest.mark.parametrize('wall_step', [0.0, -3600.0], ids=['wall-kept', 'wall-stepped-back'])
def test_a_state_that_stays_unreadable_past_the_deadline_is_given_up_on(wall_step):
    clock = SteppedClock(50.0, limit=200.0)
    clock.step_wall(51.0, wall_step)
    guard = FlakyGuard([DEADLINE_ONLY, OSError(errno.EIO, 'Input/output error')])
    with pytest.raises(GuardError, match='up to the deadline: OSError'):
        watch(guard, 'run1', clock=clock, sleep=clock.sleep)
    assert 100.0 <= clock.boot() <= 100.0 + WATCH_INTERVAL


def test_only_a_missing_state_file_reads_as_none(tmp_path):
    from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import read_json_trusted
    (tmp_path / 'a-file').write_text('')
    assert read_json_trusted(str(tmp_path / 'absent.json')) is None
    with pytest.raises(OSError) as raised:
        read_json_trusted(str(tmp_path / 'a-file' / 'state.json'))
    assert raised.value.errno == errno.ENOTDIR


# --- mode and owner are part of what is restored --------------------------------------------------------------

def test_a_mode_or_owner_the_run_changed_on_the_same_bytes_is_put_back(tmp_path):
    same = entry(tmp_path, 'same.conf', b'same')
    (tmp_path / 'same.conf').write_bytes(b'same')
    os.chmod(str(tmp_path / 'same.conf'), 0o600)
    owner = entry(tmp_path, 'owner.conf', b'owner')
    owner.update(mode=0o640, uid=os.geteuid(), gid=os.getegid())
    (tmp_path / 'owner.conf').write_bytes(b'owner')
    os.chmod(str(tmp_path / 'owner.conf'), 0o640)
    if os.geteuid() == 0:
        os.chown(str(tmp_path / 'owner.conf'), 65534, 65534)
    untouched = entry(tmp_path, 'untouched.conf', b'untouched')
    (tmp_path / 'untouched.conf').write_bytes(b'untouched')
    os.chmod(str(tmp_path / 'untouched.conf'), 0o644)
    outcomes = Guard._restore_files(RestoreSteps(), [same, owner, untouched])
    expected_owner = 'restored' if os.geteuid() == 0 else 'unchanged'
    assert [item['outcome'] for item in outcomes] == ['restored', expected_owner, 'unchanged']
    assert stat.S_IMODE(os.stat(str(tmp_path / 'same.conf')).st_mode) == 0o644
    assert os.stat(str(tmp_path / 'owner.conf')).st_uid == os.geteuid()


def test_a_state_armed_without_mode_and_owner_compares_the_bytes_and_keeps_the_live_mode(tmp_path):
    older = entry(tmp_path, 'older.conf', b'pre-run')
    for key in ('mode', 'uid', 'gid'):
        del older[key]
    (tmp_path / 'older.conf').write_bytes(b'pre-run')
    os.chmod(str(tmp_path / 'older.conf'), 0o600)
    assert [item['outcome'] for item in Guard._restore_files(RestoreSteps(), [older])] == ['unchanged']
    (tmp_path / 'older.conf').write_bytes(b'changed')
    assert [item['outcome'] for item in Guard._restore_files(RestoreSteps(), [older])] == ['restored']
    assert (tmp_path / 'older.conf').read_bytes() == b'pre-run'
    assert stat.S_IMODE(os.stat(str(tmp_path / 'older.conf')).st_mode) == 0o600
