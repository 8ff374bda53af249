"""Server's systemd commands, through a runner that records them and answers as systemctl does."""
import re

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import Server


GROUP = '/system.slice/sglang.service'


class Systemctl(object):
    """Answers `systemctl show` for MainPID and ControlGroup as systemd does; every other call succeeds."""

    def __init__(self, main_pid, group=GROUP):
        self.main_pid = main_pid
        self.group = group
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        if argv[1] == 'show':
            return 0, '%s\n' % (self.group if argv[2] == '--property=ControlGroup' else self.main_pid), ''
        return 0, '', ''


def unit(tmp_path, systemctl):
    return Server('systemd', 'sglang', str(tmp_path / 'launch.json'), str(tmp_path / 'sglang.pid'),
                  str(tmp_path / 'server.log'), 'http://127.0.0.1:30000', runner=systemctl,
                  cgroup_root=str(tmp_path / 'cgroup'))


def unit_group(tmp_path, hierarchy, pids):
    """The unit's cgroup.procs under a fake cgroup root: '' is v2's one hierarchy, 'systemd' v1's."""
    folder = tmp_path / 'cgroup' / hierarchy / GROUP.lstrip('/')
    folder.mkdir(parents=True)
    (folder / 'cgroup.procs').write_text(''.join('%d\n' % pid for pid in pids))


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
    # no readable control group here: the main PID alone
    assert stopped['changed'] is True and stopped['stopping'] == [4711]


def test_a_stop_that_does_not_wait_names_every_process_of_the_unit(tmp_path):
    for hierarchy in ('', 'systemd'):
        unit_group(tmp_path / hierarchy, hierarchy, [4713, 4711, 4712])
        server = Server('systemd', 'sglang', 'l', 'p', 'g', 'http://127.0.0.1:30000', runner=Systemctl(4711),
                        cgroup_root=str(tmp_path / hierarchy / 'cgroup'))
        assert server.stop(wait=False)['stopping'] == [4711, 4712, 4713], hierarchy


def test_a_control_group_that_is_not_the_units_own_is_never_read(tmp_path):
    # An empty or foreign answer would name the root group: every process of the host.
    unit_group(tmp_path, '', [4711, 1, 999])
    (tmp_path / 'cgroup' / 'cgroup.procs').write_text('1\n4711\n999\n')
    for group in ('', '/', '/system.slice/other.service'):
        assert unit(tmp_path, Systemctl(4711, group=group)).stop(wait=False)['stopping'] == [4711]


def test_no_running_unit_is_not_stopped(tmp_path):
    systemctl = Systemctl(0)
    stopped = unit(tmp_path, systemctl).stop(wait=False)
    assert stopped == {'changed': False, 'stopped_at': None, 'pid': None, 'stopping': [], 'strays': [], 'spared': []}
    assert not [call for call in systemctl.calls if call[1] == 'stop']


def test_the_start_enables_the_unit_without_reloading_systemd(tmp_path):
    systemctl = Systemctl(4711)
    started, _ = unit(tmp_path, systemctl).start()
    # a reload costs about 0.1 s inside the outage; the link only matters at boot
    assert ['systemctl', 'enable', '--no-reload', 'sglang'] in systemctl.calls
    assert ['systemctl', 'daemon-reload'] not in systemctl.calls
    assert started['pid'] == 4711
    unit(tmp_path, systemctl).start(daemon_reload=True)
    assert ['systemctl', 'daemon-reload'] in systemctl.calls


def fake_process(proc_root, pid, cmdline, ppid=1):
    """One /proc/PID as the kernel writes it: stat (comm in parentheses, start time field 22) and cmdline."""
    folder = proc_root / str(pid)
    folder.mkdir(parents=True)
    rest = ['S', str(ppid)] + ['0'] * 17 + [str(1000 + pid)]
    (folder / 'stat').write_text('%d (%s) %s\n' % (pid, cmdline.split(' ')[0][:15], ' '.join(rest)))
    (folder / 'cmdline').write_bytes(cmdline.replace(' ', '\0').encode() + b'\0')


# Above any pid_max (2**22): never the PID of this test or of one of its ancestors.
MAIN, CHILD, ORPHAN, OTHER = 5004711, 5004712, 5004800, 5004900


def unit_with_orphan(tmp_path):
    """A unit (main process and child in its group), an orphaned scheduler outside it, an unrelated process."""
    proc = tmp_path / 'proc'
    fake_process(proc, MAIN, 'sglang::tokenizer_manager')
    fake_process(proc, CHILD, 'sglang::scheduler_TP0', ppid=MAIN)
    fake_process(proc, ORPHAN, 'sglang::scheduler_TP1')
    fake_process(proc, OTHER, 'python3 unrelated.py')
    unit_group(tmp_path, '', [MAIN, CHILD])
    systemctl = Systemctl(MAIN)
    server = Server('systemd', 'sglang', 'l', 'p', 'g', 'http://127.0.0.1:30000', runner=systemctl,
                    cgroup_root=str(tmp_path / 'cgroup'), proc_root=str(proc))
    return server, systemctl


def test_strays_are_the_matching_processes_outside_the_units_group(tmp_path):
    server, dummy = unit_with_orphan(tmp_path)
    sglang = [re.compile('sglang::')]
    assert [(record.pid, record.cmdline) for record in server.strays(sglang, MAIN)] == \
        [(ORPHAN, 'sglang::scheduler_TP1')]
    # Without a readable group only the main PID is the server's own: its children count as strays,
    # so the container's kill step runs rather than being skipped on a guess.
    server.cgroup_root = str(tmp_path / 'nowhere')
    assert [record.pid for record in server.strays(sglang, MAIN)] == [CHILD, ORPHAN]
    # Nothing runs as the server: every match is a stray.
    assert [record.pid for record in server.strays(sglang, None)] == [MAIN, CHILD, ORPHAN]


def test_a_stop_names_its_own_and_the_strays_from_one_reading_before_the_sigterm(tmp_path):
    server, systemctl = unit_with_orphan(tmp_path)
    stopped = server.stop(wait=False, stray_patterns=[re.compile('sglang::')])
    # Every match is either being stopped (the next step awaits it) or a stray (the kill step ends it).
    assert stopped['stopping'] == [MAIN, CHILD]
    assert [record.pid for record in stopped['strays']] == [ORPHAN]
    # The group was read once, before the stop job was queued.
    shows = [call for call in systemctl.calls if call[:3] == ['systemctl', 'show', '--property=ControlGroup']]
    assert len(shows) == 1
    assert systemctl.calls.index(shows[0]) < systemctl.calls.index(['systemctl', 'stop', '--no-block', 'sglang'])
    # A stop that waits reads the group only when asked for strays.
    waiting_server, waiting_systemctl = unit_with_orphan(tmp_path / 'waited')
    waited = waiting_server.stop(wait=True)
    assert waited['stopping'] == [] and waited['strays'] == []
    assert not [call for call in waiting_systemctl.calls if '--property=ControlGroup' in call]


def test_strays_without_patterns_read_nothing(tmp_path):
    server, systemctl = unit_with_orphan(tmp_path)
    assert server.strays([], MAIN) == []
    assert systemctl.calls == []
