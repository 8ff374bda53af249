"""Runs one task of a collection module through real Ansible (ansible-runner, local connection).

The target interpreter is the host's system python3 where there is one, so
the modules prove they need nothing beyond the standard library and their
module_utils, which Ansible ships with them.
"""
import json
import os
import subprocess
import sys

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


def run_task(tmp_path, module, args, check=False, diff=False, name='task', keywords=None, files=None):
    """Run `module` with `args` once and return its result dict (with 'failed').

    ``keywords`` are task keywords (check_mode, environment, ...); ``files`` maps
    names to text placed in the play's files/ folder (what lookup('file') reads).
    """
    task = {'name': name, module: args}
    task.update(keywords or {})
    return run_tasks(tmp_path, [task], check=check, diff=diff, name=name, files=files)[name]


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


def start_module_process(tmp_path, module, args, name='direct'):
    """Start one module as its own process, without ansible-playbook (for runs that must overlap).

    AnsibleModule reads {"ANSIBLE_MODULE_ARGS": ...} from the file named in argv[1].
    Returns the Popen; read its JSON result with module_process_result().
    """
    args_file = tmp_path / ('%s-args.json' % name)
    args_file.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': args}))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, '.cache', 'collections'))
    return subprocess.Popen([sys.executable, '-m', 'ansible_collections.gpuops.sglang.plugins.modules.%s' % module,
                             str(args_file)], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)


def module_process_result(proc):
    out, err = proc.communicate()
    try:
        return TaskResult(json.loads(out))
    except ValueError:
        raise AssertionError('module printed no JSON (rc %s):\n%s\n%s' % (proc.returncode, out, err))
