import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner


class FakeModule(object):
    def __init__(self, answer=(0, 'out', ''), timeout_bin='/usr/bin/timeout'):
        self.answer = answer
        self.timeout_bin = timeout_bin
        self.calls = []

    def get_bin_path(self, name, required=False):
        return self.timeout_bin if name == 'timeout' else None

    def run_command(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        return self.answer


class StepClock(object):
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_every_command_runs_under_a_deadline_in_the_c_locale_and_is_recorded():
    module = FakeModule()
    runner = CommandRunner(module, 30)
    result = runner.run(['nvidia-smi', '--query-gpu=index'])
    argv, kwargs = module.calls[0]
    assert argv == ['/usr/bin/timeout', '--kill-after=5', '30s', 'nvidia-smi', '--query-gpu=index']
    assert kwargs['environ_update'] == {'LANG': 'C', 'LC_ALL': 'C'}
    assert runner.cmd == [['nvidia-smi', '--query-gpu=index']]
    assert (result.rc, result.stdout, result.timed_out) == (0, 'out', False)
    runner.run(['patch'], timeout=0.5)
    assert module.calls[1][0][:3] == ['/usr/bin/timeout', '--kill-after=5', '0.5s']


def test_exit_124_is_a_timeout_named_in_the_message():
    runner = CommandRunner(FakeModule(answer=(124, '', '')), 2)
    result = runner.run(['pct', 'exec', '101', '--', 'true'])
    assert result.timed_out
    assert result.describe() == '`pct exec 101 -- true` timed out after 2s and was killed'
    with pytest.raises(CommandError, match='timed out after 2s'):
        runner.check(['pct', 'status', '101'])


def test_exit_137_is_a_timeout_only_at_the_deadline():
    early = CommandRunner(FakeModule(answer=(137, '', 'Killed')), 30, clock=StepClock(0.0, 1.0))
    assert not early.run(['nvidia-smi']).timed_out
    late = CommandRunner(FakeModule(answer=(137, '', '')), 30, clock=StepClock(0.0, 35.0))
    assert late.run(['nvidia-smi']).timed_out


def test_failure_names_the_command_and_its_output():
    runner = CommandRunner(FakeModule(answer=(9, "NVIDIA-SMI has failed because it couldn't communicate\n", '')), 30)
    with pytest.raises(CommandError) as error:
        runner.check(['nvidia-smi', '-L'])
    assert str(error.value) == "`nvidia-smi -L` failed (rc 9): NVIDIA-SMI has failed because it couldn't communicate"


def test_missing_coreutils_timeout_and_bad_deadline_are_refused():
    with pytest.raises(CommandError, match='coreutils `timeout` was not found'):
        CommandRunner(FakeModule(timeout_bin=None), 30).run(['true'])
    with pytest.raises(CommandError, match='greater than 0'):
        CommandRunner(FakeModule(), 0)


def test_as_runner_gives_the_stdlib_helpers_rc_and_output_under_the_same_deadline():
    calls = []

    class Module(object):
        def get_bin_path(self, name, required=False):
            return '/usr/bin/timeout'

        def run_command(self, argv, **kwargs):
            calls.append(argv)
            return 3, 'out', 'err'

    from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandRunner
    commands = CommandRunner(Module(), 30)
    assert commands.as_runner()(['systemctl', 'show', 'sglang'], 7) == (3, 'out', 'err')
    assert calls == [['/usr/bin/timeout', '--kill-after=5', '7s', 'systemctl', 'show', 'sglang']]
    assert commands.cmd == [['systemctl', 'show', 'sglang']]


def test_the_standard_library_back_end_runs_the_command_and_records_it():
    runner = CommandRunner.over(timeout=10)
    result = runner.run(['sh', '-c', 'echo "$LC_ALL"; exit 3'])
    assert (result.rc, result.stdout.strip(), result.timed_out) == (3, 'C', False)
    assert runner.cmd == [['sh', '-c', 'echo "$LC_ALL"; exit 3']]


def test_the_standard_library_back_end_kills_a_command_at_its_deadline():
    result = CommandRunner.over(timeout=10).run(['sleep', '30'], timeout=0.2)
    assert result.timed_out and result.rc == 124
    assert result.describe() == '`sleep 30` timed out after 0.2s and was killed'


def test_the_standard_library_back_end_refuses_what_it_cannot_pass_on():
    with pytest.raises(CommandError, match='takes no cwd or input'):
        CommandRunner.over(lambda argv, timeout: (0, '', ''), 10).run(['patch'], cwd='/tmp')
