"""sglang_prefetch's compile cache folders (issue 45): made the server user's (0700) when
missing, counted when present, refused (naming the folder, its owner and mode) when another user could write or
redirect them, before anything is made; check mode makes nothing.

The server's user here is nobody (the module runs as root, as the role runs it), under a root-owned folder of the
guard's kind (tests/helpers/trusted_folder.py): pytest's tmp_path under /tmp is sticky and world-writable, which the
rule refuses.
"""
import os
import pwd
import stat

import pytest

from helpers.ansible_run import run_task
from helpers.trusted_folder import trusted_dir  # noqa: F401  pylint: disable=unused-import

MODULE = 'gpuops.sglang.sglang_prefetch'
SERVER_USER = 'nobody'


@pytest.fixture
def server_user():
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.skip('no user %s on this machine' % SERVER_USER)


@pytest.fixture
def cache_root(trusted_dir, server_user):  # noqa: F811  pylint: disable=redefined-outer-name
    """A root-owned folder the server's user can pass through (o+x), as /var/cache is."""
    if os.geteuid() != 0:
        pytest.skip('making a folder another user\'s needs root')
    os.chmod(str(trusted_dir), 0o755)
    return str(trusted_dir)


def owned_folder(path, user, mode):
    os.makedirs(path)
    os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, mode)
    return path


def caches(tmp_path, folders, check=False, diff=False):
    return run_task(tmp_path, MODULE, {'paths': [], 'cache_folders': folders, 'cache_owner': SERVER_USER},
                    check=check, diff=diff)


def test_a_missing_cache_folder_is_made_the_server_users_0700_and_its_files_are_counted_next_time(
        tmp_path, cache_root, server_user):  # pylint: disable=redefined-outer-name
    service = os.path.join(cache_root, 'cache', 'sglang')
    triton, inductor = os.path.join(service, 'triton'), os.path.join(service, 'torchinductor')
    made = caches(tmp_path, [triton, inductor], diff=True)
    assert not made.failed, made.get('msg')
    assert made['changed'] is True and made['cache_files'] == 0
    assert made['cache_folders'] == [dict(path=triton, files=0, made=True), dict(path=inductor, files=0, made=True)]
    for folder in (triton, inductor):
        info = os.lstat(folder)
        assert (info.st_uid, stat.S_IMODE(info.st_mode), stat.S_ISDIR(info.st_mode)) == (server_user.pw_uid, 0o700, True)
    # The folders above: root's, passable by the server's user, writable by no one else.
    for folder in (os.path.join(cache_root, 'cache'), service):
        info = os.lstat(folder)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o755)
    assert [entry['after']['path'] for entry in made['diff']] == [os.path.join(cache_root, 'cache'), service, triton,
                                                                   inductor]
    assert made['diff'][2] == {'before': {'path': triton, 'state': 'absent'},
                               'after': {'path': triton, 'state': 'directory', 'owner': SERVER_USER, 'mode': '0700'}}
    # What a server compiled into them is counted before the next start; nothing changes.
    os.makedirs(os.path.join(triton, 'abc'))
    for name in ('abc/kernel.cubin', 'abc/kernel.json', 'index'):
        with open(os.path.join(triton, name), 'w') as handle:
            handle.write('x')
    again = caches(tmp_path, [triton, inductor])
    assert not again.failed, again.get('msg')
    assert again['changed'] is False and again['cache_files'] == 3
    assert [entry['made'] for entry in again['cache_folders']] == [False, False]


def test_check_mode_says_what_it_would_make_and_makes_nothing(tmp_path, cache_root):  # pylint: disable=redefined-outer-name
    triton = os.path.join(cache_root, 'cache', 'sglang', 'triton')
    result = caches(tmp_path, [triton], check=True, diff=True)
    assert not result.failed, result.get('msg')
    assert result['changed'] is True and result['cache_folders'] == [dict(path=triton, files=0, made=True)]
    assert len(result['diff']) == 3
    assert os.listdir(cache_root) == []


@pytest.mark.parametrize('make, why', [
    (lambda path, user: owned_folder(path, user, 0o770),
     "(owner nobody, mode 0770) is writable by its group: another user could put code there"),
    (lambda path, user: owned_folder(path, user, 0o707), '(owner nobody, mode 0707) is writable by others'),
    (lambda path, user: owned_folder(path, pwd.getpwuid(0), 0o700),
     "(owner root, mode 0700) is not the server user nobody's own"),
    (lambda path, user: os.symlink(owned_folder(path + '.real', user, 0o700), path), 'is a symlink (to '),
], ids=['group-writable', 'world-writable', 'another-owner', 'symlink'])
def test_a_cache_folder_another_user_could_write_or_redirect_is_refused_before_anything_is_made(
        tmp_path, cache_root, server_user, make, why):  # pylint: disable=redefined-outer-name
    service = os.path.join(cache_root, 'sglang')
    os.mkdir(service, 0o755)
    bad, missing = os.path.join(service, 'triton'), os.path.join(service, 'torchinductor')
    make(bad, server_user)
    before = sorted(os.listdir(service))
    result = caches(tmp_path, [missing, bad])
    assert result.failed and result['changed'] is False
    assert bad + ' ' + why in result['msg'], result['msg']
    assert result['msg'].startswith('the compile cache folders are refused before anything stops: ')
    # The refusal comes first: the missing folder named before it is not made.
    assert sorted(os.listdir(service)) == before and result['cache_folders'] == []


def test_a_folder_above_that_others_can_write_is_refused(tmp_path, cache_root):  # pylint: disable=redefined-outer-name
    shared = os.path.join(cache_root, 'shared')
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    result = caches(tmp_path, [os.path.join(shared, 'triton')])
    assert result.failed and ('the folder above %s/triton cannot be trusted: %s is writable by its group and others'
                              ' (mode 0777)' % (shared, shared)) in result['msg'], result['msg']
    assert os.listdir(shared) == []


def test_a_folder_the_server_user_cannot_pass_through_is_refused(tmp_path, cache_root):  # pylint: disable=redefined-outer-name
    os.chmod(cache_root, 0o700)
    result = caches(tmp_path, [os.path.join(cache_root, 'cache', 'triton')])
    assert result.failed and 'the server user nobody cannot pass through %s (owner root, mode 0700)' % cache_root \
        in result['msg'], result['msg']
    assert os.listdir(cache_root) == []


def test_an_unknown_server_user_is_refused_naming_it(tmp_path, cache_root):  # pylint: disable=redefined-outer-name
    result = run_task(tmp_path, MODULE, {'cache_folders': [os.path.join(cache_root, 'triton')],
                                         'cache_owner': 'no-such-user-45'})
    assert result.failed and 'the user no-such-user-45 does not exist on this host' in result['msg']
    assert os.listdir(cache_root) == []
