"""Runs a collection module as Ansible runs it on a target (run_task), or tasks and playbooks through real Ansible
(ansible-runner, local connection: run_tasks, run_playbook).

The target interpreter is the host's system python3 where there is one, so
the modules prove they need nothing beyond the standard library and their
module_utils, which Ansible ships with them.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import ansible_runner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ansible-playbook lives beside the interpreter running the tests (the project venv).
_BIN = os.path.dirname(sys.executable)
if _BIN not in os.environ.get('PATH', '').split(os.pathsep):
    os.environ['PATH'] = _BIN + os.pathsep + os.environ.get('PATH', '')
# The checkout's ansible.cfg and collection link, whatever the caller's environment.
ANSIBLE_ENV = {'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
               'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections')}
TARGET_PYTHON = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable


class TaskResult(dict):
    @property
    def failed(self):
        return bool(self.get('failed'))


class TaskResults(dict):
    """{task name: TaskResult}, and in ``transcript`` all that Ansible showed and recorded: its stdout and every event."""
    transcript = ''


COLLECTION = 'gpuops.sglang.'
# Modules a controller-side action plugin fronts: only a real ansible-playbook runs them as users do.
ACTION_PLUGINS = frozenset(os.path.splitext(name)[0] for name in os.listdir(os.path.join(REPO, 'plugins', 'action'))
                           if name.endswith('.py'))


def run_task(tmp_path: pathlib.Path, module: str, args: dict[str, Any], check: bool = False, diff: bool = False,
             name: str = 'task', keywords: dict[str, Any] | None = None, files: dict[str, str] | None = None,
             ansible: bool = False) -> TaskResult:
    """Run `module` with `args` once and return its result dict (with 'failed').

    A collection module with no action plugin, no task keywords or files and no template in its arguments (which
    only Ansible would render) runs as its own process on the
    target's python, the way Ansible's module wrapper runs it there (run_module_process): the module's whole code
    path at a seventh of ansible-playbook's CPU (measured: 0.14 against 1.0 CPU s a task, docs/benchmarks.md).
    Everything else, and ``ansible=True``, runs one task in a real ansible-playbook (run_tasks): ``keywords`` are
    task keywords (check_mode, environment, ...); ``files`` maps names to text placed in the play's files/ folder
    (what lookup('file') reads). Every module also runs through ansible-playbook in test_modules_through_ansible.py
    and on the lab.
    """
    short = module[len(COLLECTION):] if module.startswith(COLLECTION) else None
    if short and short not in ACTION_PLUGINS and not (keywords or files or ansible or '{{' in json.dumps(args)):
        return run_module_process(tmp_path, short, args, check=check, diff=diff, name=name)
    task = {'name': name, module: args}
    task.update(keywords or {})
    return run_tasks(tmp_path, [task], check=check, diff=diff, name=name, files=files)[name]


def _module_path() -> str:
    """A folder that gives the target's python what Ansible's module wrapper ships with a module: an ``ansible``
    package holding ansible-core's module_utils, and this collection's modules and module_utils as regular packages
    (an ``__init__.py`` in each folder, as in the wrapper's zip: the guard reads the watcher's code from its package
    with pkgutil.get_data, which a namespace package cannot answer), each file a link to the checkout's.

    Named by the files it links and where they are (this checkout, this ansible-core), so a run after a module_utils
    file was added or removed, or from another checkout, makes a new one; made in a private folder and renamed into
    place, so pytest workers making it at once all get a whole one."""
    import ansible.module_utils
    plugins = os.path.join(REPO, 'plugins')
    files = sorted(os.path.relpath(os.path.join(folder, name), plugins)
                   for part in ('modules', 'module_utils')
                   for folder, _dirs, names in os.walk(os.path.join(plugins, part))
                   for name in names if name.endswith('.py'))
    origin = os.path.dirname(ansible.module_utils.__file__)
    digest = hashlib.sha256('\n'.join([REPO, origin] + files).encode()).hexdigest()[:16]
    path = os.path.join(REPO, '.cache', 'module-path', digest)
    if os.path.isdir(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    building = tempfile.mkdtemp(dir=os.path.dirname(path), prefix='.building-')
    collection = os.path.join(building, 'ansible_collections', 'gpuops', 'sglang', 'plugins')
    for package in (os.path.join(building, 'ansible'), collection, os.path.join(collection, 'modules'),
                    os.path.join(collection, 'module_utils')):
        os.makedirs(package, exist_ok=True)
    os.symlink(origin, os.path.join(building, 'ansible', 'module_utils'))
    for name in files:
        os.makedirs(os.path.dirname(os.path.join(collection, name)), exist_ok=True)
        os.symlink(os.path.join(plugins, name), os.path.join(collection, name))
    for folder, _dirs, names in os.walk(building):
        if folder != building and '__init__.py' not in names:
            open(os.path.join(folder, '__init__.py'), 'w').close()
    try:
        os.rename(building, path)
    except OSError:
        # Another worker's is in place: the same links.
        shutil.rmtree(building)
    return path


def start_module_process(tmp_path: pathlib.Path, module: str, args: dict[str, Any], check: bool = False,
                         diff: bool = False, name: str = 'direct') -> subprocess.Popen:
    """Start collection module `module` (its short name) once as its own process, as Ansible's module wrapper does
    on the target: the target's python, in a session of its own (an ansible-core worker's, or sshd's), the arguments
    (with the ``_ansible_*`` ones a controller adds) in a file named in argv[1]. Returns the Popen (runs that must
    overlap start several); module_process_result reads its result.

    What it does not show: that the wrapper ships each module with the module_utils it imports (every file is here).
    test_modules_through_ansible.py shows it for every module, and a guard armed through ansible-playbook (the idle
    bound's play in test_sglang_guard.py, every lab redeploy) for the files the guard installs for its watcher."""
    internal = {'_ansible_check_mode': check, '_ansible_diff': diff, '_ansible_no_log': False,
                '_ansible_module_name': COLLECTION + module, '_ansible_verbosity': 0, '_ansible_debug': False,
                '_ansible_keep_remote_files': False, '_ansible_tmpdir': None,
                '_ansible_remote_tmp': '~/.ansible/tmp', '_ansible_shell_executable': '/bin/sh'}
    args_file = tmp_path / ('module-%s-args.json' % name)
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': dict(args, **internal)}))
    # The path goes in as the wrapper puts it, inside the process: in PYTHONPATH it would reach what the module
    # starts (the guard's watcher imports its own copy of the code, the server its own packages).
    boot = ('import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); '
            'runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)')
    return subprocess.Popen([TARGET_PYTHON, '-c', boot, _module_path(),
                             'ansible_collections.gpuops.sglang.plugins.modules.%s' % module, str(args_file)],
                            cwd=str(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, start_new_session=True)


def module_process_result(proc: subprocess.Popen) -> TaskResult:
    """The result of a module start_module_process started, once it ended, as run_task returns one."""
    out, err = proc.communicate()
    try:
        result = TaskResult(json.loads(out))
    except ValueError:
        raise AssertionError('the module printed no JSON (rc %s):\n%s\n%s' % (proc.returncode, out, err))
    result['failed'] = bool(result.get('failed'))
    result.setdefault('changed', False)
    # The module sends its warnings as structured summaries (ansible-core 2.19); a controller shows their text.
    if 'warnings' in result:
        result['warnings'] = [warning['event']['msg'] if isinstance(warning, dict) else warning
                              for warning in result['warnings']]
    return result


def run_module_process(tmp_path: pathlib.Path, module: str, args: dict[str, Any], check: bool = False,
                       diff: bool = False, name: str = 'task') -> TaskResult:
    """Run collection module `module` once as its own process (start_module_process) and return its result."""
    return module_process_result(start_module_process(tmp_path, module, args, check=check, diff=diff, name=name))


def run_tasks(tmp_path, tasks, check=False, diff=False, name='tasks', files=None, verbosity=0):
    """Run tasks (dicts, each with a unique name) in one play, one ansible-playbook process, on localhost;
    return {task name: result dict (with 'failed'; a skipped task's is {'skipped': True, ...})}. A failing task needs ignore_errors for the rest to run."""
    private = tmp_path / ('runner-%s' % name)
    project = private / 'project'
    project.mkdir(parents=True, exist_ok=True)
    for file_name, text in (files or {}).items():
        (project / 'files').mkdir(exist_ok=True)
        (project / 'files' / file_name).write_text(text)
    play = [{
        'hosts': 'localhost',
        'gather_facts': False,
        'tasks': tasks,
    }]
    (project / 'play.yml').write_text(json.dumps(play))
    inventory = {'all': {'hosts': {'localhost': {
        'ansible_connection': 'local', 'ansible_python_interpreter': TARGET_PYTHON}}}}
    cmdline = ' '.join(flag for flag, wanted in (('--check', check), ('--diff', diff)) if wanted)
    runner = ansible_runner.run(
        private_data_dir=str(private),
        playbook='play.yml',
        inventory=json.dumps(inventory),
        cmdline=cmdline or None,
        envvars=ANSIBLE_ENV,
        quiet=True,
        settings={'suppress_ansible_output': True},
        verbosity=verbosity or None,
    )
    results = TaskResults()
    events = list(runner.events)
    results.transcript = runner.stdout.read() + '\n'.join(json.dumps(event) for event in events)
    for event in events:
        if event.get('event') in ('runner_on_ok', 'runner_on_failed'):
            result = TaskResult(event['event_data']['res'])
            result['failed'] = event['event'] == 'runner_on_failed'
            results[event['event_data'].get('task')] = result
        elif event.get('event') == 'runner_on_skipped':
            # A task whose `when` was false: its event carries no result dict.
            results[event['event_data'].get('task')] = TaskResult(skipped=True, changed=False, failed=False)
    missing = [task['name'] for task in tasks if task['name'] not in results]
    if missing:
        raise AssertionError('no result for %s (rc %s):\n%s' % (', '.join(missing), runner.rc, results.transcript))
    return results


class PlaybookRun(object):
    def __init__(self, runner):
        self.rc = runner.rc
        self.stats = runner.stats or {}
        self.events = list(runner.events)
        self.stdout = runner.stdout.read()

    def count(self, kind, host):
        return self.stats.get(kind, {}).get(host, 0)

    def failure_messages(self, host):
        return [event['event_data']['res'].get('msg', '') for event in self.events
                if event.get('event') == 'runner_on_failed' and event['event_data'].get('host') == host
                and not event['event_data'].get('ignore_errors')]


def run_playbook(tmp_path, playbook, inventory, extravars=None, name='run', limit=None, cmdline=None):
    """Run a playbook of this repository through ansible-runner (as an ops dashboard would)."""
    private = tmp_path / ('playbook-%s' % name)
    private.mkdir(parents=True, exist_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(private),
        playbook=os.path.join(REPO, playbook),
        # One source, or several (a list), relative to the repository.
        inventory=os.path.join(REPO, inventory) if isinstance(inventory, str)
        else [os.path.join(REPO, source) for source in inventory],
        extravars=extravars or {},
        limit=limit,
        cmdline=cmdline,
        envvars=ANSIBLE_ENV,
        quiet=True,
    )
    return PlaybookRun(runner)
