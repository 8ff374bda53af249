"""_module: every module ends the same way, with the same result keys and the partial result on failure."""
import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils._module import (
    ModuleFailure,
    fail,
    new_result,
    require_not_negative,
    require_positive,
    run_module,
)


class Ended(Exception):
    pass


class FakeModule(object):
    def __init__(self):
        self.ended = None

    def exit_json(self, **result):
        self.ended = ('exit', result)
        raise Ended()

    def fail_json(self, msg, **result):
        self.ended = ('fail', dict(result, msg=msg))
        raise Ended()


class ServerTrouble(Exception):
    pass


def end(body, **kwargs):
    module = FakeModule()
    result = new_result(killed=[], cmd=[])
    with pytest.raises(Ended):
        run_module(module, result, lambda: body(result), **kwargs)
    return module.ended


def test_a_body_that_returns_exits_with_every_key_of_the_result():
    def body(result):
        result.update(changed=True, killed=[4711])
    assert end(body) == ('exit', {'changed': True, 'killed': [4711], 'cmd': []})


def test_a_failure_keeps_what_the_body_already_did_and_adds_its_own_keys():
    def body(result):
        result['killed'] = [4711]
        fail('GPU 1 did not drain', elapsed=1.5)
    assert end(body) == ('fail', {'changed': False, 'killed': [4711], 'cmd': [], 'elapsed': 1.5,
                                  'msg': 'GPU 1 did not drain'})


def test_the_projects_own_exception_becomes_a_failure_in_the_modules_words():
    def body(result):
        raise ServerTrouble('systemctl stop sglang failed (rc 5)')
    ended = end(body, errors=(ServerTrouble,), describe=lambda exc: 'sglang_server stopped failed: %s' % exc)
    assert ended == ('fail', {'changed': False, 'killed': [], 'cmd': [],
                              'msg': 'sglang_server stopped failed: systemctl stop sglang failed (rc 5)'})


def test_an_exception_the_module_did_not_name_is_not_hidden():
    def body(result):
        raise KeyError('bug')
    with pytest.raises(KeyError):
        run_module(FakeModule(), new_result(), lambda: body(None), errors=(ServerTrouble,))


@pytest.mark.parametrize('failing', [False, True])
def test_finish_runs_last_on_success_and_on_failure(failing):
    def body(result):
        if failing:
            fail('refused')
    ended = end(body, finish=lambda result: result.update(cmd=[['systemctl', 'stop', 'sglang']]))
    assert ended[0] == ('fail' if failing else 'exit')
    assert ended[1]['cmd'] == [['systemctl', 'stop', 'sglang']]


def test_option_checks_name_the_option():
    with pytest.raises(ModuleFailure, match='^kill_timeout must not be negative$'):
        require_not_negative({'term_timeout': 0, 'kill_timeout': -1}, ('term_timeout', 'kill_timeout'))
    with pytest.raises(ModuleFailure, match='^command_timeout must be greater than 0$'):
        require_positive({'command_timeout': 0}, 'command_timeout')
    require_not_negative({'term_timeout': 0}, ('term_timeout',))
