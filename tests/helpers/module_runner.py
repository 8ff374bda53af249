"""Runs a module's main() in-process with only run_command (and get_bin_path) replaced."""
import os

import pytest
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

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

    def __call__(self, module_self, args, **kwargs):
        self.calls.append(list(args))
        return self.responder(list(args))


@pytest.fixture
def run_module():
    def runner(main, args, responder, check_mode=False, diff=False, bin_paths=None):
        args = dict(args)
        if check_mode:
            args['_ansible_check_mode'] = True
        if diff:
            args['_ansible_diff'] = True
        log = CommandLog(responder)
        bins = bin_paths or {}

        def exit_json(module_self, **kwargs):
            raise ModuleExit(kwargs, False)

        def fail_json(module_self, msg, **kwargs):
            kwargs['msg'] = msg
            raise ModuleExit(kwargs, True)

        def get_bin_path(module_self, name, required=False, opt_dirs=None):
            return bins.get(name)

        with patch_module_args(args), \
                mock.patch.object(basic.AnsibleModule, 'run_command', autospec=True, side_effect=log), \
                mock.patch.object(basic.AnsibleModule, 'exit_json', exit_json), \
                mock.patch.object(basic.AnsibleModule, 'fail_json', fail_json), \
                mock.patch.object(basic.AnsibleModule, 'get_bin_path', get_bin_path):
            with pytest.raises(ModuleExit) as exited:
                main()
        return exited.value.result, log.calls
    return runner
