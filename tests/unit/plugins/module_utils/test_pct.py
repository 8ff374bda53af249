import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils import _pct as pct
from ansible_collections.gpuops.sglang.plugins.module_utils._processes import ProcessSourceError
from helpers.module_runner import read_fixture


def test_parse_ps_keeps_full_command_lines():
    records = pct.parse_ps(read_fixture('ps-container.txt'))
    assert [r.pid for r in records] == [1, 42, 43, 44, 51, 206]
    assert records[2].cmdline.startswith('sglang::scheduler_TP0 ')
    assert records[4].cmdline.startswith('python3 -m sglang.launch_server --model-path')
    assert records[2].state == 'Ss'


def test_parse_ps_rejects_garbage():
    with pytest.raises(ProcessSourceError, match='unexpected ps output'):
        pct.parse_ps('OCI runtime exec failed\n')


@pytest.mark.parametrize('text, status', [
    ('status: running\n', 'running'),
    ('status: stopped\n', 'stopped'),
    ('', None),
])
def test_parse_status(text, status):
    assert pct.parse_status(text) == status


def test_argv_never_goes_through_a_shell():
    command = pct.PctCommand('/usr/sbin/pct', 101)
    assert command.kill('TERM', [5, 6]) == ['/usr/sbin/pct', 'exec', '101', '--', 'kill', '-s', 'TERM', '5', '6']
    assert command.status() == ['/usr/sbin/pct', 'status', '101']


def test_container_source_sees_reused_pid_as_gone():
    listing = ['10 1 S sglang::scheduler_TP0\n', '10 1 S python3 other.py\n']

    def run_command(argv, environ_update=None):
        return 0, listing.pop(0), ''
    source = pct.ContainerProcesses(run_command, pct.PctCommand('pct', 101))
    records = source.list()
    assert source.alive(records) == []
