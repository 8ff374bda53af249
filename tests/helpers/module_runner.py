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
