import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers import _pct as pct
from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandResult
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import ProcessRecord, ProcessSourceError
from helpers.module_runner import read_fixture

LISTING = read_fixture('pct-listing-container.txt')


def test_listing_keeps_full_command_lines_and_start_times():
    self_pid, records = pct.parse_listing(LISTING)
    assert self_pid == 8
    assert [r.pid for r in records] == [1, 2, 3, 4, 5, 6, 8]
    launcher = records[1]
    assert launcher.cmdline.startswith('python3 -m sglang.launch_server --model-path')
    assert launcher.start_time == 53672 and launcher.ppid == 1 and launcher.state == 'S'
    # a newline inside an argument does not split the record
    assert records[4].cmdline == 'python3 /opt/jobs/nightly_eval.py --note two lines'


def test_listing_cut_short_or_foreign_output_is_an_error_that_says_so():
    with pytest.raises(ProcessSourceError, match='cut short'):
        pct.parse_listing(LISTING.replace('end\n', ''))
    with pytest.raises(ProcessSourceError, match='cut short'):
        pct.parse_listing('OCI runtime exec failed\n')
    with pytest.raises(ProcessSourceError, match='does not show its own shell'):
        pct.parse_listing('self 8\nend\n')


def test_own_processes_are_the_listing_shell_and_its_children():
    records = [ProcessRecord(1, 0, 'S', 'init'), ProcessRecord(8, 1, 'S', 'sh'), ProcessRecord(9, 8, 'S', 'sh'),
               ProcessRecord(10, 9, 'R', 'tr'), ProcessRecord(11, 1, 'S', 'other')]
    assert pct.own_processes(8, records) == {8, 9, 10}


def test_signal_output_parsing():
    assert pct.parse_signal_output('sent 5\ngone 6\nrefused 1\nend\n') == {5: 'sent', 6: 'gone', 1: 'refused'}
    with pytest.raises(ProcessSourceError, match='did not finish'):
        pct.parse_signal_output('sent 5\n')


@pytest.mark.parametrize('text, status', [
    ('status: running\n', 'running'),
    ('status: stopped\n', 'stopped'),
    ('', None),
])
def test_parse_status(text, status):
    assert pct.parse_status(text) == status


def test_argv_never_goes_through_a_shell_string_built_from_input():
    command = pct.PctCommand('/usr/sbin/pct', 101)
    argv = command.signal('TERM', [ProcessRecord(5, 1, 'S', 'x', start_time=77)])
    assert argv[:6] == ['/usr/sbin/pct', 'exec', '101', '--', '/bin/sh', '-c']
    assert argv[6] == pct.SIGNAL_SCRIPT and argv[7:] == [pct.SIGNAL_NAME, 'TERM', '5:77']
    assert command.list_processes()[4:] == ['/bin/sh', '-c', pct.LIST_SCRIPT, pct.LIST_NAME]
    assert command.status() == ['/usr/sbin/pct', 'status', '101']


class FakeRunner(object):
    def __init__(self, *answers):
        self.answers = list(answers)
        self.argvs = []

    def run(self, argv):
        self.argvs.append(argv)
        rc, out, err, timed_out = self.answers.pop(0)
        return CommandResult(argv, rc, out, err, timed_out, 30)


def test_container_source_leaves_out_its_own_shell():
    source = pct.ContainerProcesses(FakeRunner((0, LISTING, '', False)), pct.PctCommand('pct', 101))
    assert 8 not in [record.pid for record in source.list()]


def test_container_source_never_signals_pid_1_and_reports_whom_it_reached():
    runner = FakeRunner((0, 'sent 2\ngone 3\nend\n', '', False))
    source = pct.ContainerProcesses(runner, pct.PctCommand('pct', 101))
    targets = [ProcessRecord(pid, 1, 'S', 'sglang::x', start_time=9) for pid in (1, 2, 3)]
    assert [record.pid for record in source.signal(targets, 'TERM')] == [2]
    assert runner.argvs[0][-2:] == ['2:9', '3:9']


def test_listing_failure_says_why():
    source = pct.ContainerProcesses(FakeRunner((255, '', 'lxc-attach: 101: failed to get init pid\n', False)),
                                    pct.PctCommand('pct', 101))
    with pytest.raises(ProcessSourceError) as error:
        source.list()
    message = str(error.value)
    assert 'listing processes in container 101 failed' in message and 'rc 255' in message
    assert 'failed to get init pid' in message and '/bin/sh and tr' in message
    assert '<script>' in message and 'echo' not in message


def test_hung_pct_is_reported_with_the_command_and_the_deadline():
    source = pct.ContainerProcesses(FakeRunner((124, '', '', True)), pct.PctCommand('pct', 101))
    with pytest.raises(ProcessSourceError, match=r'`pct exec 101 -- /bin/sh -c <script> gpuops-sglang-list` '
                                                 r'timed out after 30s'):
        source.list()


def test_the_marks_listing_names_each_process_server_marks_and_unit_only():
    stdout = ('self 90\nproc 90 0 S 5 /bin/sh\nproc 7 1 S 6 sglang::scheduler_TP0\n'
              'env 7 GPUOPS_SGLANG_SERVICE=sglang-b\nenv 7 GPUOPS_SGLANG_LAUNCH_FILE=/etc/b/launch.json\n'
              'cgroup 8 0::/system.slice/sglang.service\nend\n')
    assert pct.parse_marks(stdout) == {
        7: pct.ProcessMarks('sglang-b', '/etc/b/launch.json', None), 8: pct.ProcessMarks(None, None, 'sglang')}
    assert pct.PctCommand('/usr/sbin/pct', 101).list_processes(marks=True)[-2:] == [pct.LIST_NAME, 'marks']
