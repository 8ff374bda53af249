"""The folder tasks of roles/sglang/tasks/prepare.yml, run as they are written, on this machine, in a temporary
root: they make only what is missing, with 0750, and never chmod a folder they find. The review measured /run,
/etc and /var/log left 0750 (and a sticky bit gone) after runs with those settings; the plan now refuses a
system folder (test_role_variable_checks.py), and these tasks leave any folder they find as it was."""
import os
import stat

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils._rules import role_folders
from helpers.ansible_run import REPO, run_tasks

ROLE = os.path.join(REPO, 'roles', 'sglang')
FOLDER_TASKS = ("See which of the server's folders exist", 'Ensure the configuration folders exist')


def role_tasks(names, settings):
    """The named tasks with _sglang_folders as the plan computes it (sglang_plan's paths.folders)."""
    with open(os.path.join(ROLE, 'tasks', 'prepare.yml')) as handle:
        tasks = dict((task['name'], task) for task in yaml.safe_load(handle))
    return [dict(tasks[name], vars={'_sglang_folders': role_folders(settings)}) for name in names]


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
    tasks = role_tasks(FOLDER_TASKS, settings)
    results = run_tasks(tmp_path, tasks)
    assert not any(result.failed for result in results.values()), results.transcript
    assert mode(shared) == 0o1777 and mode(config) == 0o755
    assert mode(log_file.parent) == 0o750 and mode(log_file.parent.parent) == 0o750
    made = [entry['item']['item'] for entry in results['Ensure the configuration folders exist']['results']
            if entry.get('changed')]
    assert made == [str(log_file.parent)]


@pytest.mark.slow
def test_a_file_where_a_folder_belongs_fails_the_folder_task(tmp_path):
    blocker = tmp_path / 'run'
    blocker.write_text('not a folder')
    settings = {'sglang_config_dir': str(tmp_path / 'etc'), 'sglang_run_dir': str(blocker),
                'sglang_log_file': str(tmp_path / 'log' / 'server.log')}
    tasks = role_tasks(FOLDER_TASKS, settings)
    results = run_tasks(tmp_path, tasks)
    assert results['Ensure the configuration folders exist'].failed
    assert blocker.read_text() == 'not a folder'
