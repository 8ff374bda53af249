"""_files: the one lock and the one atomic write the patch transaction, the guard and the server share."""
import fcntl
import json
import os
import re
import stat

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base import _files as files


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


def target_of_roots(tmp_path):
    target = tmp_path / 'root-only'
    target.write_bytes(b'secret\n')
    os.chmod(str(target), 0o600)
    return target


@pytest.mark.parametrize('plant, why', [
    (lambda log, target: log.symlink_to(target), 'is a symlink'),
    (lambda log, target: log.symlink_to(target.parent / 'made-through-the-link'), 'is a symlink'),
    (lambda log, target: os.link(str(target), str(log)), 'has 2 names (hard links)'),
    (lambda log, target: os.mkfifo(str(log)), 'is not a regular file (a FIFO or a socket)'),
], ids=['symlink', 'dangling-symlink', 'hard-link', 'fifo-without-reader'])
def test_a_log_opened_for_appending_never_follows_a_link_or_writes_a_file_of_another_kind(tmp_path, plant, why):
    target = target_of_roots(tmp_path)
    log = tmp_path / 'server.log'
    plant(log, target)
    with pytest.raises(files.UntrustedPath, match='^' + re.escape('%s %s' % (log, why))):
        files.open_append_no_follow(str(log))
    assert target.read_bytes() == b'secret\n' and not (tmp_path / 'made-through-the-link').exists()


def test_a_log_opened_for_appending_is_made_when_missing_and_appended_to_blocking(tmp_path):
    log = tmp_path / 'server.log'
    for line in (b'first\n', b'second\n'):
        descriptor = files.open_append_no_follow(str(log))
        try:
            os.write(descriptor, line)
            # What the server inherits is an ordinary descriptor: O_NONBLOCK (against a FIFO) is cleared.
            assert not fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_NONBLOCK
        finally:
            os.close(descriptor)
    assert log.read_bytes() == b'first\nsecond\n'


GROUP_GID = 4242


def group_writable_folder(tmp_path, monkeypatch, members, primaries, spared=True):
    """A folder of root's, mode 0775, whose group (GROUP_GID) has these members and is the primary group of these
    accounts, as a fake group and account database say; spared: it stands where /var/log does for the rule."""
    import grp
    import pwd
    accounts = dict(list(members.items()) + list(primaries.items()))
    group = grp.struct_group(('logs', 'x', GROUP_GID, list(members)))
    entries = [pwd.struct_passwd((name, 'x', uid, GROUP_GID if name in primaries else 1, '', '/', '/bin/sh'))
               for name, uid in accounts.items()]

    def getgrgid(gid):
        if gid != GROUP_GID:
            raise KeyError(gid)
        return group

    monkeypatch.setattr(grp, 'getgrgid', getgrgid)
    monkeypatch.setattr(pwd, 'getpwall', lambda: entries)
    monkeypatch.setattr(pwd, 'getpwnam', lambda name: next(entry for entry in entries if entry.pw_name == name))
    folder = tmp_path / 'log'
    folder.mkdir()
    os.chown(str(folder), 0, GROUP_GID)
    os.chmod(str(folder), 0o775)
    if spared:
        monkeypatch.setattr(files, 'SYSTEM_GROUP_WRITABLE', frozenset([str(folder)]))
    return str(folder)


@pytest.mark.parametrize('members, primaries, trusted', [
    ({'syslog': 104}, {}, True),                  # Ubuntu's /var/log: root:syslog 0775
    ({}, {'syslog': 104}, True),                  # the daemon's own primary group
    ({'syslog': 104, 'alice': 1000}, {}, False),  # a person among the writers
    ({}, {'bob': 1001}, False),                   # a person whose primary group it is
    ({'nobody': 65534}, {}, False),               # nobody is nobody's system account
    ({}, {}, False),                              # a group of no one: nothing says whose it is
])
def test_a_folder_writable_by_its_group_is_trusted_for_the_servers_files_only_when_daemons_alone_write_through_it(
        tmp_path, monkeypatch, members, primaries, trusted):
    logs = group_writable_folder(tmp_path, monkeypatch, members, primaries)
    why = files._problem(logs, os.lstat(logs), (0,), system_group_writers=True)
    assert (why is None) is trusted, why
    # The guard's folder keeps the strict rule, whoever the group's members are.
    assert 'writable by its group' in files._problem(logs, os.lstat(logs), (0,))


def test_a_group_writable_folder_with_an_acl_is_never_trusted_for_its_group(tmp_path, monkeypatch):
    logs = group_writable_folder(tmp_path, monkeypatch, {'syslog': 104}, {})
    assert files._problem(logs, os.lstat(logs), (0,), system_group_writers=True) is None
    # An ACL's mask is what the group bits show: the ACL may grant a person write.
    monkeypatch.setattr(files, '_has_acl', lambda path: True)
    assert 'writable by its group' in files._problem(logs, os.lstat(logs), (0,), system_group_writers=True)


def test_a_log_another_user_made_first_or_others_may_write_is_refused(tmp_path):
    theirs = tmp_path / 'theirs.log'
    theirs.write_bytes(b'')
    os.chown(str(theirs), 65534, 65534)
    with pytest.raises(files.UntrustedPath, match='belongs to uid 65534'):
        files.open_append_no_follow(str(theirs))
    shared = tmp_path / 'shared.log'
    shared.write_bytes(b'')
    os.chmod(str(shared), 0o666)
    with pytest.raises(files.UntrustedPath, match='mode 0666'):
        files.open_append_no_follow(str(shared))
    assert theirs.read_bytes() == shared.read_bytes() == b''


def test_a_log_made_by_the_open_is_private_to_its_owner_and_group(tmp_path):
    made = tmp_path / 'server.log'
    os.close(files.open_append_no_follow(str(made)))
    assert stat.S_IMODE(made.stat().st_mode) & 0o007 == 0


def test_only_var_log_may_be_written_by_a_group_of_daemons(monkeypatch, tmp_path):
    web = group_writable_folder(tmp_path, monkeypatch, {'www-data': 33}, {}, spared=False)
    # A daemon handling untrusted input (a web server) is the local user the rule keeps out: only /var/log is spared.
    assert 'writable by its group' in files._problem(web, os.lstat(web), (0,), system_group_writers=True)
    monkeypatch.setattr(files, 'SYSTEM_GROUP_WRITABLE', frozenset([web]))
    assert files._problem(web, os.lstat(web), (0,), system_group_writers=True) is None
