"""The restore's parts that must never let one failure hide or stop the rest: each file on its own, every
step's error caught (RecursionError included), a router step bounded in time."""
import hashlib
import threading

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils._guard import (
    BoundedStep, Guard, GuardError, RestoreSteps, process_uids, user_name)


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
    assert user_name(0) == 'root' and user_name(2 ** 31 - 7) == str(2 ** 31 - 7)
