"""Runs a module's main() in-process with only run_command (and get_bin_path) replaced.

Every command reaches run_command behind the coreutils ``timeout`` prefix that
_command.CommandRunner adds; the responder sees, and ``calls`` records, the
command itself, and ``deadlines`` the prefix each call ran under.
"""
import os

import pytest
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

TIMEOUT = '/usr/bin/timeout'
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures')


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super(ModuleExit, self).__init__(result)
        self.result = result
        self.result['failed'] = failed


def read_fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class CommandLog(object):
    """Stands in for run_command: answers each argv with responder(argv) -> (rc, out, err)."""

    def __init__(self, responder):
        self.responder = responder
        self.calls = []
        self.deadlines = []
        self.environ = []

    def __call__(self, module_self, args, **kwargs):
        args = list(args)
        assert args[0] == TIMEOUT, 'command run without a deadline: %r' % args
        self.deadlines.append(args[1:3])
        self.environ.append(kwargs.get('environ_update'))
        self.calls.append(args[3:])
        return self.responder(args[3:])


@pytest.fixture
def run_module():
    def runner(main, args, responder, check_mode=False, diff=False, bin_paths=None, log=None):
        args = dict(args)
        if check_mode:
            args['_ansible_check_mode'] = True
        if diff:
            args['_ansible_diff'] = True
        commands = CommandLog(responder)
        bins = dict(bin_paths or {})
        bins.setdefault('timeout', TIMEOUT)

        def exit_json(module_self, **kwargs):
            raise ModuleExit(kwargs, False)

        def fail_json(module_self, msg, **kwargs):
            kwargs['msg'] = msg
            raise ModuleExit(kwargs, True)

        def get_bin_path(module_self, name, required=False, opt_dirs=None):
            return bins.get(name)

        with patch_module_args(args), \
                mock.patch.object(basic.AnsibleModule, 'run_command', autospec=True, side_effect=commands), \
                mock.patch.object(basic.AnsibleModule, 'exit_json', exit_json), \
                mock.patch.object(basic.AnsibleModule, 'fail_json', fail_json), \
                mock.patch.object(basic.AnsibleModule, 'get_bin_path', get_bin_path):
            with pytest.raises(ModuleExit) as exited:
                main()
        if log is not None:
            log.update(deadlines=commands.deadlines, environ=commands.environ)
        return exited.value.result, commands.calls
    return runner


# --- additions for the tests of sglang_server, sglang_server_info, sglang_guard and sglang_fleet_slot ---

def real_commands(argv):
    """A responder that runs each command for real, in the C locale, as run_command would.

    For the tests whose OS edge is a real executable (GNU patch, the interpreter). CommandLog hands a
    responder only the argv, so a command runs in the test's working folder, not in a cwd the module asked.
    """
    import subprocess
    env = dict(os.environ, LANG='C', LC_ALL='C')
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env, timeout=60)
    return done.returncode, done.stdout, done.stderr


def processes_naming(text, children_only=False):
    """PIDs of the live processes whose command line, its arguments joined by spaces, holds `text`
    (a test's own temporary folder, or '--port 41234', say).

    children_only: only this process's children, which is what every server, watcher and helper a module
    starts in-process is (each in its own session, so only their parent tells them apart from another
    test run's on the same machine): the ones a test may kill.
    """
    wanted = text.encode('utf-8')
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as handle:
                cmdline = handle.read().rstrip(b'\0').replace(b'\0', b' ')
            with open('/proc/%s/stat' % entry, 'rb') as handle:
                fields = handle.read().rsplit(b')', 1)[1].split()
        except (IOError, OSError, IndexError):
            continue
        if children_only and int(fields[1]) != os.getpid():
            continue
        if wanted in cmdline and fields[0] not in (b'Z', b'X'):
            found.append(int(entry))
    return sorted(found)


def kill_children_naming(text):
    """SIGKILL this process's children whose command line holds `text`: what a test started and left."""
    import signal
    for pid in processes_naming(text, children_only=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it left by itself in the meantime


def run_action(action_class, args, check_mode=False, task_vars=None):
    """Run an action plugin's run() in-process, as a task on localhost would; returns its result (with failed).

    An AnsibleActionFail becomes the result it carries, with msg and failed, as Ansible reports it.
    """
    from types import SimpleNamespace

    from ansible.errors import AnsibleActionFail
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task

    task = Task()
    task.args = dict(args)
    task.check_mode = check_mode
    # The actions under test need no connection: only ActionBase.run's look at its shell's tmpdir.
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir=None))
    action = action_class(task, connection, PlayContext(), DataLoader(), None, None)
    try:
        result = action.run(task_vars=dict(task_vars or {}))
    except AnsibleActionFail as exc:
        result = dict(exc.result, failed=True, msg=getattr(exc, 'message', None) or str(exc))
    result.setdefault('failed', False)
    return result


MODULE_UTILS = 'ansible_collections.gpuops.sglang.plugins.module_utils'


@pytest.fixture
def ansiballz_package_data(monkeypatch):
    """pkgutil.get_data reads the collection's module_utils files, as it does inside AnsiballZ.

    In-process the collection is a namespace package, whose loader reads no data: sglang_guard's arm,
    which copies the watcher's code out of the package (pkgutil.get_data), would get None. Under Ansible,
    AnsiballZ's package has a loader that reads its files; this gives the package the same for one test.
    """
    import importlib
    import importlib.machinery

    package = importlib.import_module(MODULE_UTILS)
    marker = os.path.join(list(package.__path__)[0], '__init__.py')
    monkeypatch.setattr(package, '__file__', marker, raising=False)
    monkeypatch.setattr(package.__spec__, 'loader', importlib.machinery.SourceFileLoader(MODULE_UTILS, marker))
