"""The guard's trust in its folder (_files.distrust, make_private_folder, read_json_trusted) on real folders.

Every case is built in a folder the check accepts (helpers.trusted_folder), then made unsafe the way a
careless setup makes it: given to another user (uid 65534), group- or world-writable, sticky like /tmp,
or reached through a symlink.
"""
import json
import os
import stat

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import (
    UntrustedPath, distrust, make_private_folder, read_json_trusted)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import Guard, GuardError
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

NOBODY = 65534


def give_away(path):
    os.chown(str(path), NOBODY, NOBODY)


CASES = [
    # (what is done to the folder above the guard folder, what the refusal names)
    ('nothing', lambda above: None, None),
    ('owned by another user', give_away, 'belongs to uid 65534, not to uid 0'),
    ('group-writable', lambda above: os.chmod(str(above), 0o770), 'is writable by its group (mode 0770)'),
    ('world-writable', lambda above: os.chmod(str(above), 0o707), 'is writable by others (mode 0707)'),
    ('sticky like /tmp', lambda above: os.chmod(str(above), 0o1777), 'is writable by its group and others (mode 1777)'),
    ('only read by others', lambda above: os.chmod(str(above), 0o755), None),
]


@pytest.mark.parametrize('what, make, problem', CASES, ids=[case[0] for case in CASES])
def test_a_folder_is_trusted_only_when_no_one_else_can_write_any_folder_above_it(trusted_dir, what, make, problem):
    above = trusted_dir / 'above'
    above.mkdir(mode=0o700)
    (above / 'guard').mkdir(mode=0o700)
    make(above)
    for folder in (above / 'guard', above / 'guard' / 'not-yet'):
        found = distrust(str(folder))
        assert found == (None if problem is None else '%s %s' % (above, problem))


def test_tmp_is_never_trusted():
    assert distrust('/tmp/gpuops-guard') == '/tmp is writable by its group and others (mode 1777)'


def test_the_guard_folder_itself_must_be_roots(trusted_dir):
    guard = trusted_dir / 'guard'
    guard.mkdir(mode=0o700)
    give_away(guard)
    assert distrust(str(guard)) == '%s belongs to uid 65534, not to uid 0' % guard
    assert distrust(str(guard), euid=NOBODY) is None


def test_a_symlink_is_followed_as_the_kernel_follows_it(trusted_dir, tmp_path):
    safe = trusted_dir / 'safe'
    safe.mkdir(mode=0o700)
    (trusted_dir / 'to-safe').symlink_to(safe)
    (trusted_dir / 'to-tmp').symlink_to(tmp_path)
    (trusted_dir / 'relative').symlink_to('safe/../safe')
    assert distrust(str(trusted_dir / 'to-safe' / 'guard')) is None
    assert distrust(str(trusted_dir / 'relative' / 'guard')) is None
    assert distrust(str(trusted_dir / 'to-tmp' / 'guard')) == '/tmp is writable by its group and others (mode 1777)'
    (trusted_dir / 'loop').symlink_to(trusted_dir / 'loop')
    assert distrust(str(trusted_dir / 'loop' / 'guard')).startswith('too many symlinks')


def test_a_file_where_a_folder_should_be_is_refused(trusted_dir):
    (trusted_dir / 'file').write_text('')
    assert distrust(str(trusted_dir / 'file' / 'guard')) == '%s is not a folder' % (trusted_dir / 'file')


def test_a_private_folder_is_0700_whatever_the_umask_and_an_old_one_is_tightened(trusted_dir):
    old = os.umask(0o022)
    try:
        deep = trusted_dir / 'a' / 'b' / 'guard'
        make_private_folder(str(deep))
        assert [stat.S_IMODE(os.stat(str(folder)).st_mode) for folder in (deep.parent.parent, deep.parent, deep)] == [
            0o700] * 3
        older = trusted_dir / 'older'
        older.mkdir(mode=0o755)
        make_private_folder(str(older))
        assert stat.S_IMODE(os.stat(str(older)).st_mode) == 0o700
    finally:
        os.umask(old)


def test_no_private_folder_is_made_under_an_untrusted_one(trusted_dir):
    above = trusted_dir / 'above'
    above.mkdir(mode=0o777)
    os.chmod(str(above), 0o777)
    with pytest.raises(UntrustedPath, match='writable by its group and others'):
        make_private_folder(str(above / 'guard'))
    assert not (above / 'guard').exists()


def test_a_state_file_of_another_user_or_a_symlink_is_not_read(trusted_dir):
    good = trusted_dir / 'state.json'
    good.write_text(json.dumps({'run_id': 'r'}))
    os.chmod(str(good), 0o600)
    assert read_json_trusted(str(good)) == {'run_id': 'r'}
    assert read_json_trusted(str(trusted_dir / 'absent.json')) is None
    theirs = trusted_dir / 'theirs.json'
    theirs.write_text('{}')
    give_away(theirs)
    with pytest.raises(UntrustedPath, match='belongs to uid 65534'):
        read_json_trusted(str(theirs))
    shared = trusted_dir / 'shared.json'
    shared.write_text('{}')
    os.chmod(str(shared), 0o666)
    with pytest.raises(UntrustedPath, match='writable by its group and others'):
        read_json_trusted(str(shared))
    (trusted_dir / 'link.json').symlink_to(good)
    with pytest.raises(UntrustedPath, match='is a symlink'):
        read_json_trusted(str(trusted_dir / 'link.json'))


def test_every_guard_action_refuses_an_untrusted_folder_before_reading_it(trusted_dir):
    above = trusted_dir / 'above'
    above.mkdir(mode=0o700)
    guard = Guard(str(above / 'guard'))
    guard.make_folder()
    (above / 'guard' / 'state.json').write_text('{"run_id": "forged"}')
    give_away(above)
    for action in (guard.state, guard.last_fired, lambda: guard.confirm('forged'),
                   lambda: guard.restore('why', 'controller'), guard.make_folder,
                   lambda: guard.install_runtime(lambda name: b'')):
        with pytest.raises(GuardError, match='is not safe for a guard that runs as root: %s belongs to uid 65534'
                           % above):
            action()
    assert sorted(os.listdir(str(above / 'guard'))) == ['state.json']


# --- the guard folder is a folder of the guard's own -----------------------------------------------------------

@pytest.mark.parametrize('folder', ['/', '/var/lib', '/etc', '/tmp', '/var/lib/gpuops-sglang/..', '//usr/local/',
                                    '/proc/1', '/sys/fs/cgroup'])
def test_a_system_folder_is_never_the_guard_folder_and_is_never_made_private(monkeypatch, folder):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _guard

    def made(path, mode=0o700):
        raise AssertionError('make_private_folder(%s) ran on a system folder' % path)
    monkeypatch.setattr(_guard, 'make_private_folder', made)
    guard = Guard(folder)
    for action in (guard.check_folder, guard.make_folder, guard.state):
        with pytest.raises(GuardError, match='system folder|kernel file system'):
            action()


@pytest.mark.parametrize('name, refused', [
    ('sglang', False), ('sglang@1', False), ('sglang-7b_v2.1', False),
    ('.', True), ('..', True), ('../etc', True), ('a/b', True), ('', True), ('a b', True), (None, True),
])
def test_only_a_plain_service_name_names_a_guard(trusted_dir, name, refused):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import service_name_problem
    assert bool(service_name_problem(name)) == refused
    if refused:
        guard = Guard(str(trusted_dir / 'guard'))
        with pytest.raises(GuardError, match='not a plain name'):
            guard.arm('run1', 60, [], {'service_name': name}, 'h', 'python3', {}, systemd=False)
        assert not (trusted_dir / 'guard').exists()
