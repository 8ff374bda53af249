"""The server's output is appended as root: it never follows a link another user put where its log belongs, and the
role's preflight refuses folders for the server's files that another user could write into.

The review's attack: in a log folder another user could write, that user linked server.log to a root-owned 0600
file, and the next start appended the server's output to it as root. A detached start opens the log without
following links (sglang_server); for systemd, whose StandardOutput=append: follows links, the preflight's trust
check of the config, run and log folders (sglang_server_info's folders_untrusted, refused by sglang_decision) is
the defence, before anything stops."""
import grp
import json
import os
import pwd
import shutil
import stat
import tempfile

import pytest

from helpers.ansible_run import REPO, TARGET_PYTHON, run_playbook, run_task
from helpers.tiny import alive
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture; /tmp is no trusted folder)

NOBODY = 65534
NOBODY_GID = pwd.getpwuid(NOBODY).pw_gid
SECRET = 'root:only:the owner reads this\n'


def root_only_file(folder):
    secret = folder / 'shadow-like'
    secret.write_text(SECRET)
    os.chmod(str(secret), 0o600)
    return secret


def symlink_to(log, secret):
    log.symlink_to(secret)


def hard_link_to(log, secret):
    os.link(str(secret), str(log))


@pytest.mark.slow
@pytest.mark.parametrize('plant, words', [(symlink_to, 'is a symlink'), (hard_link_to, 'has 2 names (hard links)')],
                         ids=['symlink', 'hard-link'])
def test_a_log_linked_to_a_file_of_roots_is_refused_and_the_file_left_untouched(tmp_path, servers, plant, words):
    secret = root_only_file(tmp_path)
    server = servers('a')
    log = server.root / 'tiny.log'
    plant(log, secret)
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert started.failed and 'refused to write the server\'s output to %s: %s %s' % (log, log, words) in started['msg']
    assert secret.read_text() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    # Refused before anything ran: no pid file, no server.
    assert not (server.root / 'tiny.pid').exists() and started['pid'] is None


@pytest.mark.slow
def test_a_fifo_where_the_log_belongs_is_refused(tmp_path, servers):
    server = servers('a')
    log = server.root / 'tiny.log'
    os.mkfifo(str(log))
    # A reader, so that a plain open for writing would not block: only the kind of file refuses it.
    reader = os.open(str(log), os.O_RDONLY | os.O_NONBLOCK)
    try:
        started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    finally:
        os.close(reader)
    assert started.failed and '%s is not a regular file (prw' % log in started['msg']
    assert not (server.root / 'tiny.pid').exists()


@pytest.mark.slow
def test_a_regular_log_gets_the_servers_output_appended(tmp_path, servers):
    server = servers('a')
    log = server.root / 'tiny.log'
    log.write_text('kept from before\n')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    assert log.read_text().startswith('kept from before\n') and alive(started['pid'])


def group_writable(above):
    os.chmod(str(above), 0o770)
    return '%s is writable by its group (mode 0770)' % above


def world_writable(above):
    os.chmod(str(above), 0o1777)
    return '%s is writable by its group and others (mode 1777)' % above


def another_users(above):
    os.chown(str(above), NOBODY, NOBODY)
    return '%s belongs to uid %d, not to uid 0' % (above, NOBODY)


def serving(tmp_path, servers):
    """A server started as the role starts it: (the server, its start's result)."""
    server = servers('a')
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='started'), name='start')
    assert not started.failed, started['msg']
    return server, started


def preflight(tmp_path, server, folders, name='preflight', user='root', model='/models/m'):
    """The role's preflight.yml as the role runs it, on this machine: sglang_server_info reads the server and the
    folders (gather.yml), sglang_decision decides. What the plan would hand it is given as the role's variables."""
    plan = {'expected_server_info': {}, 'expected_environment': {}, 'configs': [], 'launcher': None, 'patch': None,
            'adaptive': False, 'files': [], 'left_alone_because': ''}
    play = [{
        'hosts': 'gpu-test', 'gather_facts': False,
        'module_defaults': {'gpuops.sglang.sglang_server_info': dict(
            [(key, value) for key, value in server.args().items()
             if key in ('manager', 'service_name', 'launch_file', 'pidfile', 'url')], user=user, group=None)},
        'vars': {'_sglang_plan': plan, '_sglang_folders': folders, '_sglang_guard_dir': str(tmp_path / 'no-guard'),
                 '_sglang_patch_stamp': str(tmp_path / 'no-stamp'), '_sglang_group': None,
                 '_sglang_serves_http': True, 'sglang_python': TARGET_PYTHON, 'sglang_force_restart': False,
                 'sglang_patch_file': '', 'sglang_user': user, 'sglang_model_path': model,
                 'sglang_draft_model_path': 'org/draft', 'sglang_router_url': ''},
        'tasks': [{'name': 'Preflight', 'ansible.builtin.import_tasks': os.path.join(REPO, 'roles', 'sglang', 'tasks',
                                                                                     'preflight.yml')}],
    }]
    (tmp_path / ('%s.yml' % name)).write_text(json.dumps(play))
    (tmp_path / 'hosts.json').write_text(json.dumps({'all': {'hosts': {'gpu-test': {
        'ansible_connection': 'local', 'ansible_python_interpreter': TARGET_PYTHON}}}}))
    return run_playbook(tmp_path, str(tmp_path / ('%s.yml' % name)), str(tmp_path / 'hosts.json'), name=name)


@pytest.mark.slow
@pytest.mark.parametrize('loosen', [group_writable, world_writable, another_users],
                         ids=['group-writable', 'world-writable', 'another-users'])
def test_the_preflight_refuses_a_log_folder_another_user_could_write_with_the_server_left_serving(
        tmp_path, trusted_dir, servers, loosen):  # noqa: F811  (the fixture)
    server, started = serving(tmp_path, servers)
    config, logs = trusted_dir / 'etc', trusted_dir / 'log'
    config.mkdir(mode=0o750)
    logs.mkdir(mode=0o750)
    why = loosen(logs)
    # The role's folders: the config folder is sound, the log's folder is not made yet (the role would make it).
    run = preflight(tmp_path, server, [str(config), str(logs / 'sglang')])
    messages = run.failure_messages('gpu-test')
    assert run.rc != 0 and len(messages) == 1, run.stdout
    assert ('the server\'s files on gpu-test would live in folders another user could write into: %s, as %s.'
            % (logs / 'sglang', why)) in messages[0]
    assert str(config) not in messages[0]
    assert alive(started['pid']) and not (logs / 'sglang').exists()


@pytest.mark.slow
def test_the_preflight_passes_folders_only_root_can_write(tmp_path, trusted_dir, servers):  # noqa: F811  (the fixture)
    server = servers('a')
    model = trusted_dir / 'model'
    model.mkdir()
    passed = preflight(tmp_path, server, [str(trusted_dir / 'etc'), str(trusted_dir / 'run')], model=str(model))
    assert passed.rc == 0 and passed.failure_messages('gpu-test') == [], passed.stdout


@pytest.mark.slow
def test_a_model_folder_the_server_user_cannot_read_is_refused_with_the_server_left_serving(
        tmp_path, trusted_dir, servers):  # noqa: F811  (the fixture)
    server, started = serving(tmp_path, servers)
    # Root reads a model folder 0700 of its own; the server's user (nobody) cannot, as on NFS with root_squash.
    reachable = tempfile.mkdtemp(prefix='gpuops-model-', dir='/tmp')
    try:
        os.chmod(reachable, 0o755)
        model = os.path.join(reachable, 'model')
        os.mkdir(model, 0o700)
        with open(os.path.join(model, 'config.json'), 'w') as handle:
            handle.write('{}')
        run = preflight(tmp_path, server, [str(trusted_dir / 'etc')], user='nobody', model=model)
        messages = run.failure_messages('gpu-test')
        assert run.rc != 0 and len(messages) == 1, run.stdout
        assert ("the server's user nobody (group %s) cannot load what the server reads on gpu-test, checked as that"
                ' user: sglang_model_path %s cannot be listed (Permission denied).'
                % (grp.getgrgid(NOBODY_GID).gr_name, model)) in messages[0]
        assert 'org/draft' not in messages[0]
        assert alive(started['pid'])
        # The same folder, readable by its user: the preflight passes.
        os.chmod(model, 0o755)
        os.chmod(os.path.join(model, 'config.json'), 0o644)
        passed = preflight(tmp_path, server, [str(trusted_dir / 'etc')], name='again', user='nobody', model=model)
        assert passed.rc == 0 and passed.failure_messages('gpu-test') == [], passed.stdout
    finally:
        shutil.rmtree(reachable)


@pytest.mark.slow
def test_a_model_folder_missing_for_a_root_server_is_refused_with_the_server_left_serving(
        tmp_path, trusted_dir, servers):  # noqa: F811  (the fixture)
    # The default server user is root: a mistyped or unmounted model folder is found before the stop, not by a new
    # server that fails to load and rolls back.
    server, started = serving(tmp_path, servers)
    missing = str(trusted_dir / 'not-mounted' / 'model')
    run = preflight(tmp_path, server, [str(trusted_dir / 'etc')], model=missing)
    messages = run.failure_messages('gpu-test')
    assert run.rc != 0 and len(messages) == 1, run.stdout
    assert 'sglang_model_path %s does not exist' % missing in messages[0], messages[0]
    assert alive(started['pid'])
