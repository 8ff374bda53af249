"""_files: the one lock and the one atomic write the patch transaction, the guard and the server share."""
import json
import os
import stat

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils import _files as files


def test_an_atomic_write_replaces_the_bytes_with_the_mode_asked_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / 'state.json'
    target.write_bytes(b'old')
    files.write_atomic(str(target), b'{"run_id": "r1"}', 0o640)
    assert target.read_bytes() == b'{"run_id": "r1"}'
    assert stat.S_IMODE(os.stat(str(target)).st_mode) == 0o640
    assert sorted(os.listdir(str(tmp_path))) == ['state.json']


def test_a_refused_chown_keeps_the_writer_as_owner(tmp_path, monkeypatch):
    def refuse(path, uid, gid):
        raise PermissionError('not root')
    monkeypatch.setattr(os, 'chown', refuse)
    files.write_atomic(str(tmp_path / 'restored.conf'), b'x', 0o600, owner=(0, 0))
    assert (tmp_path / 'restored.conf').read_bytes() == b'x'


def test_a_failed_rename_removes_its_temp_file(tmp_path, monkeypatch):
    def fail(src, dst):
        raise OSError('read-only file system')
    monkeypatch.setattr(os, 'rename', fail)
    with pytest.raises(OSError, match='read-only'):
        files.write_atomic(str(tmp_path / 'stamp.json'), b'{}', suffix='.sglang_patch.tmp')
    assert os.listdir(str(tmp_path)) == []


def test_a_temp_file_beside_its_target_carries_the_suffix_that_names_its_writer(tmp_path):
    temp = files.write_beside(str(tmp_path / 'server.py'), b'new', '.sglang_patch.tmp', 0o644)
    name = os.path.basename(temp)
    assert name.startswith('.server.py.') and name.endswith('.sglang_patch.tmp')
    assert open(temp, 'rb').read() == b'new'


def test_read_json_says_none_for_a_missing_file_and_refuses_one_that_is_not_json(tmp_path):
    assert files.read_json(str(tmp_path / 'absent.json')) is None
    (tmp_path / 'state.json').write_text(json.dumps({'armed': True}))
    assert files.read_json(str(tmp_path / 'state.json')) == {'armed': True}
    (tmp_path / 'torn.json').write_text('{"armed": tr')
    with pytest.raises(ValueError):
        files.read_json(str(tmp_path / 'torn.json'))


@pytest.mark.parametrize('kind', ['folder', 'lock file'])
def test_a_held_lock_makes_the_second_taker_give_up_with_the_hint(tmp_path, kind):
    path = str(tmp_path) if kind == 'folder' else str(tmp_path / 'lock')
    with files.FileLock(path, 0):
        with pytest.raises(files.LockTimeout, match='waited 0s for the lock on %s: another run holds it' % path):
            files.FileLock(path, 0, hint='another run holds it').acquire()
    # Released on leaving: the next taker gets it at once.
    files.FileLock(path, 0).acquire().release()


def test_the_lock_is_waited_for_while_its_holder_lets_go(tmp_path):
    holder = files.FileLock(str(tmp_path), 0).acquire()
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds
        holder.release()
    waiter = files.FileLock(str(tmp_path), 5, clock=lambda: clock[0], sleep=sleep).acquire()
    assert waiter.fd is not None and 0 < clock[0] < 5
    waiter.release()
