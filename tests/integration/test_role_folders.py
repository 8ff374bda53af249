"""The folder and launcher tasks of roles/sglang/tasks/prepare.yml, run as they are written after the
sglang_server_info call of gather.yml that tells them what is missing, on this machine, in a temporary root:
they make only what is missing, with 0750, and never chmod a folder they find. The review measured /run,
/etc and /var/log left 0750 (and a sticky bit gone) after runs with those settings; the plan now refuses a
system folder (test_role_variable_checks.py), and these tasks leave any folder they find as it was."""
import grp
import os
import pwd
import stat

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils._rules import role_folders
from helpers.ansible_run import REPO, run_tasks

ROLE = os.path.join(REPO, 'roles', 'sglang')
FOLDER_TASK = 'Ensure the configuration folders exist'
LAUNCHER_TASK = "Install the launcher (systemd's ExecStart; an operator's hand restart of a detached server)"
ASK = 'Ask the host what is missing'


def role_tasks(names, settings, tmp_path, launcher=None, group='root'):
    """gather.yml's sglang_server_info call with the folders as the plan computes them (sglang_plan's
    paths.folders) and the launcher it reads, registered as gather.yml does, then the named tasks of prepare.yml."""
    with open(os.path.join(ROLE, 'tasks', 'prepare.yml')) as handle:
        tasks = dict((task['name'], task) for task in yaml.safe_load(handle))
    ask = {'service_name': 'gpuops-test-absent', 'manager': 'detached', 'launch_file': str(tmp_path / 'launch.json'),
           'pidfile': str(tmp_path / 'absent.pid'), 'url': 'http://127.0.0.1:9', 'folders': role_folders(settings)}
    plan = {}
    if launcher is not None:
        plan['launcher'] = {'path': launcher, 'content': read_launcher()}
        ask['launcher'] = plan['launcher']
    role_vars = {'_sglang_plan': plan, '_sglang_launcher': launcher, 'sglang_group': group}
    return ([{'name': ASK, 'gpuops.sglang.sglang_server_info': ask, 'register': '_sglang_state'}] +
            [dict(tasks[name], vars=role_vars) for name in names])


def read_launcher():
    with open(os.path.join(ROLE, 'files', 'launcher.py')) as handle:
        return handle.read()


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


@pytest.mark.slow
def test_folders_found_keep_their_mode_and_missing_ones_are_made_0750(tmp_path):
    shared = tmp_path / 'shared'          # an existing folder others use, sticky like /tmp
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    config = tmp_path / 'etc-like'        # an existing folder with its own mode
    config.mkdir()
    os.chmod(str(config), 0o755)
    log_file = tmp_path / 'new' / 'log' / 'server.log'
    settings = {'sglang_config_dir': str(config), 'sglang_run_dir': str(shared), 'sglang_log_file': str(log_file)}
    # The server's group (sglang_group) may enter a folder the role makes, to read its launch configuration.
    server_group = grp.getgrgid(pwd.getpwnam('nobody').pw_gid)
    tasks = role_tasks([FOLDER_TASK], settings, tmp_path, group=server_group.gr_name)
    results = run_tasks(tmp_path, tasks)
    assert not any(result.failed for result in results.values()), results.transcript
    assert mode(shared) == 0o1777 and mode(config) == 0o755
    assert mode(log_file.parent) == 0o750 and mode(log_file.parent.parent) == 0o750
    assert os.stat(str(log_file.parent)).st_gid == server_group.gr_gid and os.stat(str(config)).st_gid == 0
    made = [entry['item'] for entry in results[FOLDER_TASK]['results'] if entry.get('changed')]
    assert made == [str(log_file.parent)]


@pytest.mark.slow
def test_a_file_where_a_folder_belongs_fails_the_folder_task(tmp_path):
    blocker = tmp_path / 'run'
    blocker.write_text('not a folder')
    settings = {'sglang_config_dir': str(tmp_path / 'etc'), 'sglang_run_dir': str(blocker),
                'sglang_log_file': str(tmp_path / 'log' / 'server.log')}
    tasks = role_tasks([FOLDER_TASK], settings, tmp_path)
    tasks[-1]['ignore_errors'] = True
    results = run_tasks(tmp_path, tasks)
    # Every folder of the plan is missing here, the file in the way included, in the plan's order.
    assert results[ASK]['folders_missing'] == role_folders(settings) and str(blocker) in role_folders(settings)
    assert results[FOLDER_TASK].failed
    assert blocker.read_text() == 'not a folder'


@pytest.mark.slow
def test_the_launcher_is_installed_0755_when_it_differs_and_left_alone_when_it_is_current(tmp_path):
    config = tmp_path / 'etc'
    config.mkdir()
    launcher = config / 'launcher.py'
    launcher.write_text('an older launcher\n')
    os.chmod(str(launcher), 0o644)
    settings = {'sglang_config_dir': str(config), 'sglang_run_dir': str(config), 'sglang_log_file': str(config / 'l')}
    first = run_tasks(tmp_path, role_tasks([LAUNCHER_TASK], settings, tmp_path, str(launcher)), name='first')
    assert first[ASK]['launcher_current'] is False and first[LAUNCHER_TASK]['changed'], first.transcript
    assert launcher.read_text() == read_launcher() and mode(launcher) == 0o755
    again = run_tasks(tmp_path, role_tasks([LAUNCHER_TASK], settings, tmp_path, str(launcher)), name='again')
    assert again[ASK]['launcher_current'] is True
    assert again[LAUNCHER_TASK].get('skipped') and not again[LAUNCHER_TASK].get('changed'), again.transcript
