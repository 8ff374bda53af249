"""Server's systemd commands, through a runner that records them and answers as systemctl does."""
from ansible_collections.gpuops.sglang.plugins.module_utils._server import Server


class Systemctl(object):
    """Answers `systemctl show --property=MainPID --value` with main_pid; every other call succeeds."""

    def __init__(self, main_pid):
        self.main_pid = main_pid
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        if argv[1] == 'show':
            return 0, '%d\n' % self.main_pid, ''
        return 0, '', ''


def unit(tmp_path, systemctl):
    return Server('systemd', 'sglang', str(tmp_path / 'launch.json'), str(tmp_path / 'sglang.pid'),
                  str(tmp_path / 'server.log'), 'http://127.0.0.1:30000', runner=systemctl)


def test_a_stop_that_waits_blocks_in_systemctl_and_leaves_nothing_stopping(tmp_path):
    systemctl = Systemctl(4711)
    stopped = unit(tmp_path, systemctl).stop()
    assert ['systemctl', 'stop', 'sglang'] in systemctl.calls
    assert stopped['changed'] is True and stopped['pid'] == 4711 and stopped['stopping'] == []


def test_a_stop_that_does_not_wait_queues_the_job_and_names_the_main_process(tmp_path):
    systemctl = Systemctl(4711)
    stopped = unit(tmp_path, systemctl).stop(wait=False)
    # systemd keeps the drain bound (TimeoutStopSec) and SIGKILLs the unit after it
    assert ['systemctl', 'stop', '--no-block', 'sglang'] in systemctl.calls
    assert ['systemctl', 'stop', 'sglang'] not in systemctl.calls
    assert stopped['changed'] is True and stopped['stopping'] == [4711]


def test_no_running_unit_is_not_stopped(tmp_path):
    systemctl = Systemctl(0)
    stopped = unit(tmp_path, systemctl).stop(wait=False)
    assert stopped == {'changed': False, 'stopped_at': None, 'pid': None, 'stopping': []}
    assert not [call for call in systemctl.calls if call[1] == 'stop']


def test_the_start_enables_the_unit_without_reloading_systemd(tmp_path):
    systemctl = Systemctl(4711)
    started, _ = unit(tmp_path, systemctl).start()
    # a reload costs about 0.1 s inside the outage; the link only matters at boot
    assert ['systemctl', 'enable', '--no-reload', 'sglang'] in systemctl.calls
    assert ['systemctl', 'daemon-reload'] not in systemctl.calls
    assert started['pid'] == 4711 and started['leftovers'] == []
    unit(tmp_path, systemctl).start(daemon_reload=True)
    assert ['systemctl', 'daemon-reload'] in systemctl.calls
