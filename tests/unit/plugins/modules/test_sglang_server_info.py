"""sglang_server_info's main() on a detached server: a real process in its own session named by a pid file,
its HTTP side a responder, its configuration files and patch stamp real files in a temporary folder."""
import grp
import hashlib
import json
import os
import pathlib
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from helpers.http_responder import Reply, http_responder  # noqa: F401  (the fixture)
from helpers.module_runner import ansiballz_package_data, run_module  # noqa: F401  (the fixtures)
from helpers.module_runner import kill_children_naming, real_commands
from helpers.port_owner import Squatter
from helpers.simulated import free_port
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture; the guard refuses /tmp)
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import LAUNCH_MARK, SERVICE_MARK
from ansible_collections.gpuops.sglang.plugins.modules import sglang_guard, sglang_patch, sglang_server_info

KEYS = {'changed', 'service_manager', 'python_exists', 'running', 'pid', 'healthy', 'mismatches', 'configs_changed',
        'guard_armed_by', 'guard_last_fired', 'patch', 'adaptive_tiers', 'generates', 'generate_error',
        'sglang_version', 'folders_missing', 'folders_untrusted', 'launcher_current', 'server_access', 'cmd'}
PATCH_KEYS = {'proven', 'why', 'patch_sha256', 'site_packages', 'files', 'sglang_version'}
SERVER_INFO = {'max_running_requests': 64, 'model_path': '/models/m',
               'environment': {'SGLANG_ENABLE_TORCH_COMPILE': '0'}}
DIFF = '--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n'


def no_commands(argv):
    raise AssertionError('sglang_server_info ran a command on a detached server: %r' % argv)


class Host(object):
    """The detached server's files in tmp_path; `start()` runs a real process in its own session for it."""

    def __init__(self, tmp_path, url, listener):
        self.root = tmp_path
        self.url = url
        self.listener = listener
        self.pidfile = tmp_path / 'sglang.pid'
        self.launch = tmp_path / 'launch.json'
        self.launch.write_text(json.dumps({'python': sys.executable, 'module': 'sglang.launch_server',
                                           'args': ['--port', 30000], 'environment': {}}))
        self.procs = []

    def start(self):
        # Its own session and marks, as the module starts a detached server: the pid file names the session leader,
        # believed only for a process with this service's and launch file's marks. It holds the responder's listening
        # socket, as a server holds its own: the port is the server's.
        env = dict(os.environ, **{SERVICE_MARK: 'sglang', LAUNCH_MARK: str(self.launch)})
        proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', 'sglang-of', str(self.root)],
                                start_new_session=True, env=env, pass_fds=(self.listener,))
        self.procs.append(proc)
        # Until the child has exec'd, /proc/PID/environ is still the forked test's, without the marks: a module run
        # in between would rightly not believe the pid file (seen on a loaded machine). Wait for the exec.
        deadline = time.monotonic() + 30
        while b'sglang-of' not in open('/proc/%d/cmdline' % proc.pid, 'rb').read():
            assert time.monotonic() < deadline, 'the stand-in process did not start'
            time.sleep(0.01)
        self.pidfile.write_text('%d\n' % proc.pid)
        return proc

    def args(self, **extra):
        base = dict(manager='detached', service_name='sglang', launch_file=str(self.launch),
                    pidfile=str(self.pidfile), url=self.url)
        base.update(extra)
        return base

    def stop(self):
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def host(tmp_path, http_responder):
    made = Host(tmp_path, http_responder.url, http_responder.fileno())
    yield made
    made.stop()


def info(run_module, host, responder=no_commands, **extra):
    result, calls = run_module(sglang_server_info.main, host.args(**extra), responder)
    return result


def test_a_server_that_does_not_run_is_neither_running_nor_healthy_and_is_not_asked(run_module, host,
                                                                                    http_responder):
    result = info(run_module, host, expected_server_info={'max_running_requests': 64})
    assert not result['failed'] and set(result) >= KEYS
    assert result['running'] is False and result['pid'] is None and result['healthy'] is False
    assert result['changed'] is False and result['mismatches'] == [] and result['service_manager'] == 'detached'
    assert http_responder.requests == []


@pytest.mark.parametrize('running', [True, False], ids=['running', 'down'])
def test_a_squatter_on_the_port_is_not_healthy_not_read_and_never_sent_the_key(run_module, host, tmp_path, running):
    # Issue 41: another user's process holds the server's port (bound first while the server loaded its model, or
    # while it is down) and answers as the server would. It was reported healthy, its /server_info was the server's
    # settings, and it got the server's key.
    keys = tmp_path / 'server.yaml'
    keys.write_text('api-key: "server-key"\n')
    port = free_port()
    host.launch.write_text(json.dumps({'python': sys.executable, 'module': 'sglang.launch_server',
                                       'args': ['--port', port, '--config', str(keys)], 'environment': {}}))
    host.url = 'http://127.0.0.1:%d' % port
    with Squatter(port, dict(SERVER_INFO, text='x')) as squatter:
        if running:
            host.start()
        result = info(run_module, host, expected_server_info={'max_running_requests': 64}, generate_probe=True)
    assert not result['failed'] and result['running'] is running
    assert result['healthy'] is False and result['generates'] is False and result['mismatches'] == []
    assert squatter.requests == [] and 'Bearer server-key' not in squatter.authorizations()


def test_a_pid_file_naming_a_process_that_is_gone_is_not_running(run_module, host):
    proc = host.start()
    proc.kill()
    proc.wait()
    result = info(run_module, host)
    assert not result['failed'] and result['running'] is False and result['pid'] is None


@pytest.mark.parametrize('health, healthy', [(200, True), (503, False)])
def test_a_running_server_is_healthy_only_when_health_answers_200(run_module, host, http_responder, health,
                                                                   healthy):
    http_responder.route('GET', '/health', status=health)
    http_responder.route('GET', '/server_info', json=SERVER_INFO)
    proc = host.start()
    result = info(run_module, host, expected_server_info={'max_running_requests': 96})
    assert not result['failed'] and set(result) >= KEYS
    assert result['running'] is True and result['pid'] == proc.pid and result['healthy'] is healthy
    # An unhealthy server's settings are not read: mismatches stay empty.
    assert result['mismatches'] == (['max_running_requests is 64, want 96'] if healthy else [])
    assert [request.path for request in http_responder.requests] == (['/health', '/server_info'] if healthy
                                                                     else ['/health'])


@pytest.mark.parametrize('expected, environment, found', [
    ({'max_running_requests': 64, 'model_path': '/models/m'}, {}, []),
    ({'max_running_requests': 32}, {}, ['max_running_requests is 64, want 32']),
    ({'speculative_algorithm': 'EAGLE3'}, {}, ['speculative_algorithm is null, want "EAGLE3"']),
    ({}, {'SGLANG_ENABLE_TORCH_COMPILE': '0'}, []),
    ({}, {'SGLANG_ENABLE_TORCH_COMPILE': '1'}, ['environment SGLANG_ENABLE_TORCH_COMPILE is "0", want "1"']),
    ({'max_running_requests': 32}, {'NCCL_DEBUG': 'INFO'},
     ['max_running_requests is 64, want 32', 'environment NCCL_DEBUG is null, want "INFO"']),
])
def test_server_info_is_compared_with_what_is_expected(run_module, host, http_responder, expected, environment,
                                                       found):
    http_responder.route('GET', '/health', status=200)
    http_responder.route('GET', '/server_info', json=SERVER_INFO)
    host.start()
    result = info(run_module, host, expected_server_info=expected, expected_environment=environment)
    assert not result['failed'] and result['healthy'] is True and result['mismatches'] == found
    assert result['changed'] is False


@pytest.mark.parametrize('health, generate, generates, error', [
    (200, Reply(json={'text': 'pong', 'meta_info': {}}), True, None),
    # Rank 0 of a server group whose other rank is gone: /health 200, generation refused (sglang issue 4780).
    (200, Reply(status=500, json={'error': 'rank 1 lost'}), False, 'POST /generate answered 500'),
    (200, Reply(json={'meta_info': {}}), False, 'POST /generate answered 200 without a generated text'),
    (503, None, False, 'the server is not healthy'),
])
def test_the_generate_probe_says_whether_a_real_generation_answers(run_module, host, http_responder, health,
                                                                  generate, generates, error):
    http_responder.route('GET', '/health', status=health)
    if generate is not None:
        http_responder.route('POST', '/generate', replies=[generate])
    host.start()
    result = info(run_module, host, generate_probe=True)
    assert not result['failed'] and set(result) >= KEYS
    assert result['generates'] is generates
    assert (result['generate_error'] or '').startswith(error or '') and (error is None) == (result['generate_error'] is None)
    posts = [request for request in http_responder.requests if request.method == 'POST']
    assert len(posts) == (1 if health == 200 else 0)
    if posts:
        assert posts[0].json['sampling_params']['max_new_tokens'] == 1


def test_without_the_probe_nothing_is_generated_and_generates_is_null(run_module, host, http_responder):
    http_responder.route('GET', '/health', status=200)
    host.start()
    result = info(run_module, host)
    assert result['generates'] is None and result['generate_error'] is None
    assert [request.method for request in http_responder.requests] == ['GET']


@pytest.mark.parametrize('alive', [True, False])
def test_a_rank_without_http_is_healthy_while_it_runs_and_is_never_asked(run_module, host, http_responder, alive):
    # A rank > 0 of a server spanning several hosts: url "", no /health, no /server_info, no generation.
    if alive:
        host.start()
    result = info(run_module, host, url='', expected_server_info={'max_running_requests': 64}, generate_probe=True)
    assert not result['failed'] and set(result) >= KEYS
    assert result['running'] is alive and result['healthy'] is alive
    assert result['mismatches'] == [] and result['generates'] is None
    assert http_responder.requests == []


def test_an_older_server_is_read_at_get_server_info(run_module, host, http_responder):
    http_responder.route('GET', '/health', status=200)
    http_responder.route('GET', '/get_server_info', json=SERVER_INFO)
    host.start()
    result = info(run_module, host, expected_server_info={'max_running_requests': 64})
    assert not result['failed'] and result['mismatches'] == []
    assert [request.path for request in http_responder.requests] == ['/health', '/server_info', '/get_server_info']


@pytest.mark.parametrize('reply, said', [
    (Reply(401), '/server_info answered 401: the server wants an API key'),
    (Reply(500), '/server_info answered 500'),
    (Reply(200, body='<html>'), '/server_info answered 200 with a body that is not JSON'),
])
def test_settings_that_cannot_be_read_are_one_mismatch_saying_why(run_module, host, http_responder, reply, said):
    http_responder.route('GET', '/health', status=200)
    http_responder.route('GET', '/server_info', replies=[reply])
    host.start()
    result = info(run_module, host, expected_server_info={'max_running_requests': 64})
    assert not result['failed']
    assert len(result['mismatches']) == 1
    assert result['mismatches'][0].startswith('its settings could not be read: ' + said)


def test_the_key_of_the_launch_configuration_goes_to_server_info_and_never_to_health(run_module, host,
                                                                                     http_responder, tmp_path):
    keys = tmp_path / 'server.yaml'
    keys.write_text('api-key: "server-key"\n')
    host.launch.write_text(json.dumps({'python': sys.executable, 'module': 'sglang.launch_server',
                                       'args': ['--config', str(keys)], 'environment': {}}))
    http_responder.route('GET', '/health', status=200)
    http_responder.route('GET', '/server_info', json=SERVER_INFO)
    host.start()
    result = info(run_module, host, expected_server_info={'max_running_requests': 64})
    assert not result['failed'] and result['mismatches'] == []
    health, server_info = http_responder.requests
    assert 'Authorization' not in health.headers
    assert server_info.headers['Authorization'] == 'Bearer server-key'
    assert 'server-key' not in repr(result)


def test_configs_that_differ_from_the_live_files_are_named_and_left_as_they_are(run_module, host, tmp_path):
    same, other, missing, unit = (tmp_path / name for name in ('same.json', 'other.json', 'missing.json',
                                                               'sglang.service'))
    same.write_text('{"a": 1}\n')
    other.write_bytes(b'{"a": 1}')
    unit.write_text('[Service]\n')
    configs = [{'label': 'same', 'path': str(same), 'content': '{"a": 1}\n'},
               {'label': 'other', 'path': str(other), 'content': '{"a": 1}\n'},
               {'label': 'missing', 'path': str(missing), 'content': 'x'},
               {'label': 'unit', 'path': str(unit), 'content': '[Service]\nchanged\n', 'systemd_only': True}]
    before = {path: path.read_bytes() for path in (same, other, unit)}
    result = info(run_module, host, configs=configs)
    assert not result['failed'] and result['changed'] is False
    # Byte for byte (a missing final newline differs); the unit only counts where systemd manages the server.
    assert result['configs_changed'] == ['other', 'missing']
    assert {path: path.read_bytes() for path in (same, other, unit)} == before and not missing.exists()


def test_a_config_content_is_a_secret_that_no_result_shows(run_module, host, tmp_path):
    live = tmp_path / 'keys.yaml'
    live.write_text('api-key: "old"\n')
    result = info(run_module, host, configs=[{'label': 'API keys', 'path': str(live),
                                              'content': 'api-key: "secret-new-key"\n'}])
    assert result['configs_changed'] == ['API keys'] and 'secret-new-key' not in repr(result)


def test_folders_that_are_not_folders_are_listed_in_order_and_left_as_they_are(run_module, host, tmp_path):
    found, missing, a_file, linked, dangling = (tmp_path / name for name in ('found', 'missing', 'a-file', 'linked',
                                                                              'dangling'))
    found.mkdir()
    a_file.write_text('not a folder')
    linked.symlink_to(found)                # a link to a folder is that folder
    dangling.symlink_to(tmp_path / 'gone')  # a link to nothing is not
    folders = [str(path) for path in (missing, found, a_file, linked, dangling)]
    result = info(run_module, host, folders=folders)
    assert not result['failed'] and result['changed'] is False
    assert result['folders_missing'] == [str(missing), str(a_file), str(dangling)]
    assert not missing.exists() and a_file.read_text() == 'not a folder'


def test_folders_another_user_could_write_are_listed_with_why_and_left_as_they_are(run_module, host, trusted_dir):
    sound, shared, foreign = (trusted_dir / name for name in ('sound', 'shared', 'foreign'))
    for folder in (sound, shared, foreign):
        folder.mkdir(mode=0o750)
    os.chmod(str(shared), 0o775)
    os.chown(str(foreign), 65534, 65534)
    folders = [str(sound), str(sound / 'not-made-yet'), str(shared / 'log'), str(foreign)]
    result = info(run_module, host, folders=folders)
    assert not result['failed'] and result['folders_untrusted'] == [
        {'folder': str(shared / 'log'), 'why': '%s is writable by its group (mode 0775)' % shared},
        {'folder': str(foreign), 'why': '%s belongs to uid 65534, not to uid 0' % foreign}]
    assert stat.S_IMODE(os.stat(str(shared)).st_mode) == 0o775 and not (shared / 'log').exists()


@pytest.fixture
def open_dir():
    """A folder every user can reach (tmp_path lies under root's 0700 pytest folder, which nobody can enter)."""
    made = tempfile.mkdtemp(prefix='gpuops-access-', dir='/tmp')
    os.chmod(made, 0o755)
    yield pathlib.Path(made)
    shutil.rmtree(made)


def model_folder(parent, name, folder_mode=0o755, file_mode=0o644):
    """A model folder as root makes it: a config, weights, and a link to a blob (a Hugging Face snapshot's shape)."""
    folder = parent / name
    folder.mkdir()
    (parent / 'blob').write_text('tokens')
    os.chmod(str(parent / 'blob'), 0o644)
    for file_name in ('config.json', 'model.safetensors'):
        (folder / file_name).write_text('{}')
        os.chmod(str(folder / file_name), file_mode)
    (folder / 'tokenizer.json').symlink_to(parent / 'blob')
    os.chmod(str(folder), folder_mode)
    return folder


def access(run_module, host, folders, user='nobody', group=None):
    entries = [{'label': label, 'path': str(path)} for label, path in folders]
    result = info(run_module, host, user=user, group=group, readable_folders=entries)
    assert not result['failed']
    return result['server_access']


def test_a_model_folder_root_reads_but_the_server_user_cannot_is_a_problem(run_module, host, open_dir):
    # Root lists a folder 0700 of its own; nobody (uid 65534) cannot: the check ran as that user, not as root.
    private = model_folder(open_dir, 'private', folder_mode=0o700)
    assert os.listdir(str(private))
    found = access(run_module, host, [('sglang_model_path', private)])
    assert found == {'user': 'nobody', 'group': grp.getgrgid(pwd.getpwnam('nobody').pw_gid).gr_name,
                     'checked': [str(private)], 'skipped': [],
                     'problems': [{'label': 'sglang_model_path', 'path': str(private),
                                   'why': 'cannot be listed (Permission denied)'}]}


def test_a_model_folder_the_server_user_can_read_has_no_problem(run_module, host, open_dir):
    readable = model_folder(open_dir, 'readable')
    found = access(run_module, host, [('sglang_model_path', readable), ('sglang_draft_model_path', readable)])
    assert found['checked'] == [str(readable), str(readable)] and found['problems'] == []


def test_files_the_server_user_cannot_open_are_named(run_module, host, open_dir):
    locked = model_folder(open_dir, 'locked', file_mode=0o600)
    found = access(run_module, host, [('sglang_model_path', locked)])
    assert found['problems'] == [{'label': 'sglang_model_path', 'path': str(locked),
                                  'why': '2 file(s) in it cannot be opened for reading: config.json (Permission'
                                         ' denied), model.safetensors (Permission denied)'}]


def test_a_missing_model_folder_and_a_file_in_its_place_are_problems(run_module, host, open_dir):
    (open_dir / 'a-file').write_text('x')
    found = access(run_module, host, [('sglang_model_path', open_dir / 'gone'),
                                      ('sglang_draft_model_path', open_dir / 'a-file')])
    assert [entry['why'] for entry in found['problems']] == ['does not exist', 'is not a folder']


def test_a_hub_id_and_an_empty_path_are_skipped_not_checked(run_module, host):
    found = access(run_module, host, [('sglang_model_path', 'meta-llama/Llama-3.1-8B-Instruct'),
                                      ('sglang_draft_model_path', '')])
    assert found['checked'] == [] and found['problems'] == []
    assert found['skipped'] == [
        {'label': 'sglang_model_path', 'path': 'meta-llama/Llama-3.1-8B-Instruct',
         'why': 'not an absolute path (a hub id): SGLang downloads it'},
        {'label': 'sglang_draft_model_path', 'path': '', 'why': 'empty: no folder'}]


@pytest.mark.parametrize('user, group, label', [('gpuops-no-such-user', None, 'user'),
                                                ('nobody', 'gpuops-no-such-group', 'group')])
def test_a_server_user_or_group_that_does_not_exist_is_a_problem(run_module, host, open_dir, user, group, label):
    found = access(run_module, host, [('sglang_model_path', open_dir)], user=user, group=group)
    name = user if label == 'user' else group
    assert found['problems'] == [{'label': label, 'path': None,
                                  'why': 'the %s %s does not exist on this host' % (label, name)}]


def test_without_readable_folders_only_the_user_is_reported(run_module, host):
    found = info(run_module, host)['server_access']
    assert found == {'user': 'root', 'group': 'root', 'checked': [], 'skipped': [], 'problems': []}


LAUNCHER = '#!/usr/bin/python3\nprint("launch")\n'


@pytest.mark.parametrize('content, mode, current', [
    (LAUNCHER, 0o755, True),
    (LAUNCHER, 0o644, False),                  # the bytes, but not executable as systemd's ExecStart
    (LAUNCHER.rstrip('\n'), 0o755, False),    # byte for byte: the final newline counts
    (None, None, False),                      # not installed
])
def test_launcher_current_says_whether_the_launcher_holds_its_bytes_with_mode_0755(run_module, host, tmp_path,
                                                                                   content, mode, current):
    installed = tmp_path / 'launcher.py'
    if content is not None:
        installed.write_text(content)
        os.chmod(str(installed), mode)
    result = info(run_module, host, launcher={'path': str(installed), 'content': LAUNCHER})
    assert not result['failed'] and result['launcher_current'] is current
    assert (installed.read_text() if installed.exists() else None) == content


def test_without_folders_or_launcher_nothing_is_listed_and_launcher_current_is_null(run_module, host):
    result = info(run_module, host)
    assert result['folders_missing'] == [] and result['launcher_current'] is None


@pytest.mark.parametrize('python, exists', [(sys.executable, True), ('/nonexistent/bin/python', False), (None, True)])
def test_python_exists_says_whether_the_interpreter_is_there(run_module, host, python, exists):
    extra = {'python': python} if python else {}
    result = info(run_module, host, **extra)
    assert not result['failed'] and result['python_exists'] is exists


def site_packages(tmp_path, version='0.5.12.post1'):
    site = tmp_path / 'site-packages'
    (site / 'sglang').mkdir(parents=True)
    (site / 'sglang' / 'mod.py').write_text('x = 1\n')
    dist = site / ('sglang-%s.dist-info' % version)
    dist.mkdir()
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: sglang\nVersion: %s\n\nbody\n' % version)
    return site


def apply_patch(run_module, site, stamp):
    """The diff applied for real by sglang_patch (GNU patch), which writes the stamp."""
    result, _ = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': str(site), 'python': sys.executable,
                                               'patch': '/usr/bin/patch', 'stamp': str(stamp)}, real_commands)
    assert not result['failed'] and result['changed'], result.get('msg')
    assert (site / 'sglang' / 'mod.py').read_text() == 'x = 2\n'


def test_a_stamp_written_by_sglang_patch_proves_the_patch_while_the_files_hold_its_bytes(run_module, host,
                                                                                         tmp_path):
    site = site_packages(tmp_path)
    stamp = tmp_path / 'patch.stamp'
    apply_patch(run_module, site, stamp)
    result = info(run_module, host, patch_content=DIFF, patch_stamp=str(stamp), python=sys.executable)
    assert not result['failed'] and set(result['patch']) == PATCH_KEYS
    assert result['patch'] == {'proven': True, 'why': None, 'site_packages': str(site), 'files': ['sglang/mod.py'],
                               'sglang_version': '0.5.12.post1',
                               'patch_sha256': hashlib.sha256(DIFF.encode()).hexdigest()}

    # A rollback (or a reinstall) put other bytes back: the stamp proves nothing any more.
    (site / 'sglang' / 'mod.py').write_text('x = 1\n')
    result = info(run_module, host, patch_content=DIFF, patch_stamp=str(stamp), python=sys.executable)
    assert result['patch']['proven'] is False and result['patch']['files'] == []
    assert result['patch']['why'] == '%s changed since the patch was applied' % (site / 'sglang' / 'mod.py')


@pytest.mark.parametrize('content, python, why', [
    (DIFF.replace('x = 2', 'x = 3'), sys.executable, 'the patch stamp records another patch'),
    (DIFF, '/usr/bin/python3-other', 'the patch stamp records another interpreter or strip'),
])
def test_a_stamp_of_another_patch_or_interpreter_proves_nothing(run_module, host, tmp_path, content, python, why):
    site = site_packages(tmp_path)
    stamp = tmp_path / 'patch.stamp'
    apply_patch(run_module, site, stamp)
    result = info(run_module, host, patch_content=content, patch_stamp=str(stamp), python=python)
    assert not result['failed']
    assert result['patch']['proven'] is False and result['patch']['why'] == why
    assert result['patch']['site_packages'] is None and result['patch']['sglang_version'] is None


@pytest.mark.parametrize('given, why', [
    ({}, 'no patch or stamp was given'),
    ({'patch_content': DIFF}, 'no patch or stamp was given'),
    ({'patch_content': DIFF, 'patch_stamp': '/nonexistent/patch.stamp'}, 'no readable patch stamp'),
])
def test_without_a_readable_stamp_the_patch_is_not_proven_and_says_why(run_module, host, given, why):
    result = info(run_module, host, **given)
    assert not result['failed'] and set(result['patch']) == PATCH_KEYS
    assert result['patch']['proven'] is False and result['patch']['why'].startswith(why)


def test_a_stamp_that_is_not_json_is_not_proof(run_module, host, tmp_path):
    stamp = tmp_path / 'patch.stamp'
    stamp.write_text('{half')
    result = info(run_module, host, patch_content=DIFF, patch_stamp=str(stamp))
    assert not result['failed'] and result['patch']['proven'] is False
    assert result['patch']['why'].startswith('no readable patch stamp')
    assert stamp.read_text() == '{half'


def venv_with_sglang(tmp_path, adaptive_source):
    """A real interpreter (a venv) whose site-packages holds an sglang with that adaptive_spec_params.py."""
    venv = tmp_path / 'venv'
    subprocess.check_call([sys.executable, '-m', 'venv', '--without-pip', str(venv)])
    python = str(venv / 'bin' / 'python')
    site = subprocess.check_output([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                   universal_newlines=True).strip()
    speculative = os.path.join(site, 'sglang', 'srt', 'speculative')
    os.makedirs(speculative)
    open(os.path.join(site, 'sglang', '__init__.py'), 'w').close()
    with open(os.path.join(speculative, 'adaptive_spec_params.py'), 'w') as handle:
        handle.write(adaptive_source)
    return python


@pytest.mark.parametrize('adaptive_source, tiers', [
    ('def _load_adaptive_config(path):\n    pass\n', True),
    ('def load_adaptive_config(path):\n    pass\n', False),
    ('def _load_adaptive_config(:\n', None),
])
def test_adaptive_tiers_are_read_from_the_source_the_interpreter_finds(run_module, host, tmp_path, adaptive_source,
                                                                      tiers):
    python = venv_with_sglang(tmp_path, adaptive_source)
    result, calls = run_module(sglang_server_info.main, host.args(python=python, check_adaptive_tiers=True),
                               real_commands)
    assert not result['failed'], result.get('msg')
    assert result['adaptive_tiers'] is tiers
    assert [call[:2] for call in calls] == [[python, '-I']] and result['cmd'] == calls


def test_adaptive_tiers_are_null_for_an_interpreter_without_sglang_or_that_is_missing(run_module, host, tmp_path):
    result, calls = run_module(sglang_server_info.main, host.args(python=sys.executable, check_adaptive_tiers=True),
                               real_commands)
    assert not result['failed'] and result['adaptive_tiers'] is None and len(calls) == 1
    result, calls = run_module(sglang_server_info.main, host.args(python=str(tmp_path / 'no-python'),
                                                                  check_adaptive_tiers=True), no_commands)
    assert not result['failed'] and result['adaptive_tiers'] is None and result['python_exists'] is False


def test_a_proven_stamp_tells_the_adaptive_tiers_without_running_the_interpreter(run_module, host, tmp_path):
    site = site_packages(tmp_path)
    (site / 'sglang' / 'srt' / 'speculative').mkdir(parents=True)
    (site / 'sglang' / 'srt' / 'speculative' / 'adaptive_spec_params.py').write_text('def load_adaptive_config():'
                                                                                     '\n    pass\n')
    stamp = tmp_path / 'patch.stamp'
    apply_patch(run_module, site, stamp)
    result, calls = run_module(sglang_server_info.main, host.args(
        python=sys.executable, patch_content=DIFF, patch_stamp=str(stamp), check_adaptive_tiers=True), no_commands)
    assert not result['failed'] and result['patch']['proven'] is True
    assert result['adaptive_tiers'] is False and calls == []


def test_adaptive_tiers_are_null_when_not_asked(run_module, host):
    result = info(run_module, host)
    assert result['adaptive_tiers'] is None and result['cmd'] == []


def guard_task(run_module, folder, host, state, **extra):
    """sglang_guard on the same server; systemctl and systemd-run (hosts with systemd) answered as success."""
    args = dict(state=state, folder=str(folder), server={
        'manager': 'detached', 'service_name': 'sglang', 'launch_file': str(host.launch),
        'pidfile': str(host.pidfile), 'log_file': str(host.root / 'log'), 'url': host.url})
    args.update(extra)
    result, _ = run_module(sglang_guard.main, args, lambda argv: (0, '', ''))
    return result


def test_the_armed_guard_and_the_last_restore_are_reported(run_module, ansiballz_package_data, host, trusted_dir):
    folder = trusted_dir / 'guard'
    result = info(run_module, host, guard_folder=str(folder))
    assert result['guard_armed_by'] is None and result['guard_last_fired'] is None
    try:
        armed = guard_task(run_module, folder, host, 'armed', run_id='run-7', deadline=600)
        assert not armed['failed'], armed.get('msg')
        result = info(run_module, host, guard_folder=str(folder))
        assert not result['failed'] and result['guard_armed_by'] == 'run-7' and result['guard_last_fired'] is None
        # A takeover with no previous server to start: the restore fails, and its report stays for the next run.
        restored = guard_task(run_module, folder, host, 'restored', reason='taken over')
        assert restored['failed'] and restored['fired']['acted_by'] == 'takeover'
        result = info(run_module, host, guard_folder=str(folder))
        assert not result['failed'] and result['guard_armed_by'] is None
        assert result['guard_last_fired'] == restored['fired']
    finally:
        kill_children_naming(str(folder))


def test_a_guard_state_that_is_not_json_fails_with_every_key(run_module, host, trusted_dir):
    folder = trusted_dir / 'guard'
    folder.mkdir(mode=0o700)
    (folder / 'state.json').write_text('{half')
    result = info(run_module, host, guard_folder=str(folder))
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'].startswith('reading the state of sglang failed: ')
    assert 'state.json is not valid JSON' in result['msg']
    assert (folder / 'state.json').read_text() == '{half'


def test_check_mode_reads_the_same_and_changes_nothing(run_module, host, http_responder):
    http_responder.route('GET', '/health', status=200)
    host.start()
    real, _ = run_module(sglang_server_info.main, host.args(), no_commands)
    check, _ = run_module(sglang_server_info.main, host.args(), no_commands, check_mode=True)
    assert real == check and check['changed'] is False and check['healthy'] is True


MAIN_PID = ['systemctl', 'show', '--property=MainPID', '--value', 'sglang']
CONTROL_GROUP = ['systemctl', 'show', '--property=ControlGroup', '--value', 'sglang']


def systemctl_main_pid(answer):
    """systemctl as systemd answers `show --property=MainPID --value UNIT` with (rc, stdout), and the unit's control
    group with nothing (its main process alone is then the server's own)."""
    def respond(argv):
        assert argv in (MAIN_PID, CONTROL_GROUP), argv
        return (answer[0], answer[1], '') if argv == MAIN_PID else (0, '\n', '')
    return respond


@pytest.mark.parametrize('running', [True, False])
def test_under_systemd_the_units_main_pid_says_whether_it_runs(run_module, host, http_responder, running):
    http_responder.route('GET', '/health', status=200)
    # The unit's main process is this test's, which holds the responder's listening socket.
    pid = os.getpid() if running else None
    result, calls = run_module(sglang_server_info.main, host.args(manager='systemd'),
                               systemctl_main_pid((0, '%d\n' % (pid or 0))))
    assert not result['failed'] and result['service_manager'] == 'systemd'
    assert result['pid'] == pid and result['running'] is running and result['healthy'] is running
    # A running unit's port is checked to be its own before /health is believed: its main PID and control group.
    assert result['cmd'] == calls == [MAIN_PID] + ([MAIN_PID, CONTROL_GROUP] if running else [])


def test_under_systemd_the_unit_file_is_compared_too(run_module, host, tmp_path):
    unit = tmp_path / 'sglang.service'
    unit.write_text('[Service]\n')
    result, _ = run_module(sglang_server_info.main, host.args(manager='systemd', configs=[
        {'label': 'unit', 'path': str(unit), 'content': '[Service]\nchanged\n', 'systemd_only': True}]),
        systemctl_main_pid((0, '0\n')))
    assert not result['failed'] and result['configs_changed'] == ['unit']
    assert unit.read_text() == '[Service]\n'


# A failed or garbled answer leaves the server's state unknown: never reported as "not running".
@pytest.mark.parametrize('answer', [(124, ''), (1, ''), (0, 'garbage\n')], ids=['hung', 'failed', 'garbled'])
def test_a_systemctl_that_does_not_answer_fails_naming_the_command(run_module, host, answer):
    result, _ = run_module(sglang_server_info.main, host.args(manager='systemd'), systemctl_main_pid(answer))
    assert result['failed'] and set(result) >= KEYS
    assert 'systemctl show --property=MainPID --value sglang' in result['msg']
