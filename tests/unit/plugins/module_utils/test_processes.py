import re

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers import _processes as processes
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._pct import parse_listing
from helpers.module_runner import read_fixture


class FakeClock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeSource(object):
    """Processes that die after a given signal once enough fake time passed.

    ``on_signal`` maps (pid, signame) to a function run when that signal reaches
    that pid: it may add processes (a child forked during shutdown, a respawn)
    or change a command line.
    """

    def __init__(self, clock, records, dies_on, on_signal=None):
        self.clock = clock
        self.records = dict((record.pid, record) for record in records)
        self.dies_on = dies_on  # pid -> (signal name, seconds after it) or None: never dies
        self.on_signal = on_signal or {}
        self.dead_at = {}
        self.sent = []

    def add(self, record, dies_on):
        self.records[record.pid] = record
        self.dies_on[record.pid] = dies_on

    def list(self):
        return [record for pid, record in sorted(self.records.items()) if not self._dead(pid)]

    def signal(self, records, signame):
        reached = []
        for record in records:
            current = self.records.get(record.pid)
            if current is None or self._dead(record.pid) or not current.same_process(record):
                continue
            self.sent.append((record.pid, signame))
            reached.append(record)
            rule = self.dies_on.get(record.pid)
            if signame == 'KILL' and rule is not None and rule[0] != 'KILL':
                rule = ('KILL', 0.0)
            if rule is not None and rule[0] == signame and record.pid not in self.dead_at:
                self.dead_at[record.pid] = self.clock() + rule[1]
            hook = self.on_signal.pop((record.pid, signame), None)
            if hook is not None:
                hook(self)
        return reached

    def _dead(self, pid):
        return pid in self.dead_at and self.clock() >= self.dead_at[pid]

    def alive(self, records):
        return [self.records[record.pid] for record in records
                if not self._dead(record.pid) and self.records[record.pid].same_process(record)]


def record(pid, cmdline=None, state='S', start_time=None):
    return processes.ProcessRecord(pid, 1, state, cmdline or 'sglang::scheduler_TP%d' % pid,
                                   start_time=1000 + pid if start_time is None else start_time)


SGLANG = processes.compile_patterns(processes.DEFAULT_SGLANG_PATTERNS)


def rescan(listing):
    return processes.select(listing, SGLANG, protected_pids={1})


def run_policy(dies_on, term_timeout, kill_timeout=10.0, on_signal=None, with_rescan=False):
    clock = FakeClock()
    targets = [record(pid) for pid in sorted(dies_on)]
    source = FakeSource(clock, targets, dict(dies_on), on_signal)
    outcome = processes.terminate(source, targets, term_timeout, kill_timeout, rescan=rescan if with_rescan else None,
                                  clock=clock, sleep=clock.sleep)
    return outcome, source, clock


def test_process_exiting_on_term_gets_only_term():
    outcome, source, clock = run_policy({10: ('TERM', 0.9)}, term_timeout=10)
    assert source.sent == [(10, 'TERM')]
    assert outcome.killed == [{'pid': 10, 'cmdline': 'sglang::scheduler_TP10', 'signal': 'TERM'}]
    assert outcome.remaining == []
    # polled, not slept for the whole timeout
    assert clock.now < 2.0


def test_stubborn_process_is_killed_after_term_timeout():
    outcome, source, clock = run_policy({10: ('TERM', 0.1), 11: ('KILL', 0.0)}, term_timeout=3)
    assert source.sent == [(10, 'TERM'), (11, 'TERM'), (11, 'KILL')]
    assert [entry['signal'] for entry in outcome.killed] == ['TERM', 'KILL']
    assert outcome.remaining == []
    assert 3.0 <= clock.now < 4.0


def test_zero_term_timeout_sends_kill_at_once():
    outcome, source, _ = run_policy({10: ('KILL', 0.0)}, term_timeout=0)
    assert source.sent == [(10, 'KILL')]
    assert outcome.killed[0]['signal'] == 'KILL'


def test_process_that_survives_kill_is_reported_remaining():
    outcome, _, clock = run_policy({10: None}, term_timeout=1, kill_timeout=2)
    assert [r.pid for r in outcome.remaining] == [10]
    assert outcome.killed[0]['signal'] == 'KILL'
    assert clock.now == pytest.approx(3.0, abs=0.01)


def test_no_targets_sends_nothing():
    outcome = processes.terminate(FakeSource(FakeClock(), [], {}), [], 10)
    assert outcome.killed == [] and outcome.remaining == []


def test_child_forked_during_shutdown_is_found_by_the_next_listing_and_stopped():
    def fork_child(source):
        source.add(record(20, 'sglang::detokenizer'), ('TERM', 0.2))
    outcome, source, _ = run_policy({10: ('TERM', 0.5)}, term_timeout=5, on_signal={(10, 'TERM'): fork_child},
                                    with_rescan=True)
    assert source.sent == [(10, 'TERM'), (20, 'TERM')]
    assert [entry['pid'] for entry in outcome.killed] == [10, 20]
    assert outcome.remaining == []


def test_process_that_changes_its_command_line_on_term_is_still_followed_and_killed():
    def retitle(source):
        old = source.records[10]
        source.records[10] = processes.ProcessRecord(10, 1, 'S', 'python3 draining', start_time=old.start_time)
    outcome, source, _ = run_policy({10: ('KILL', 0.0)}, term_timeout=1, on_signal={(10, 'TERM'): retitle},
                                    with_rescan=True)
    assert source.sent == [(10, 'TERM'), (10, 'KILL')]
    assert outcome.killed == [{'pid': 10, 'cmdline': 'python3 draining', 'signal': 'KILL'}]
    assert outcome.remaining == []


def test_a_respawn_that_keeps_coming_back_is_a_survivor_of_the_final_listing():
    counter = {'next': 30}

    def respawn(source):
        pid = counter['next']
        counter['next'] += 1
        source.add(record(pid, 'python3 -m sglang.launch_server --port 30000'), ('TERM', 0.0))
        source.on_signal[(pid, 'TERM')] = respawn
        source.on_signal[(pid, 'KILL')] = respawn
    outcome, source, _ = run_policy({10: ('TERM', 0.0)}, term_timeout=1, kill_timeout=1,
                                    on_signal={(10, 'TERM'): respawn}, with_rescan=True)
    assert outcome.remaining and all('launch_server' in r.cmdline for r in outcome.remaining)
    assert all(r.pid not in (10,) for r in outcome.remaining)


def test_a_reused_pid_is_a_different_process():
    first = record(10, start_time=500)
    newcomer = processes.ProcessRecord(10, 1, 'S', first.cmdline, start_time=900)
    assert not first.same_process(newcomer)
    assert first.same_process(processes.ProcessRecord(10, 1, 'S', 'another title', start_time=500))


def test_select_matches_full_cmdline_dedupes_and_skips_protected_and_zombies():
    _, records = parse_listing(read_fixture('pct-listing-container.txt'))
    records.append(records[2])  # same PID listed twice, as `ps aux | grep` pipelines did
    records.append(processes.ProcessRecord(77, 1, 'Z', 'sglang::scheduler_TP1'))
    chosen = processes.select(records, SGLANG, protected_pids={1, 4})
    assert [r.pid for r in chosen] == [2, 3]
    assert all('nightly_eval' not in r.cmdline for r in chosen)


def test_invalid_pattern_names_the_pattern():
    with pytest.raises(ValueError, match=re.escape("'sglang::('")):
        processes.compile_patterns(['sglang::('])


def test_planned_kills_report_the_first_signal():
    assert processes.planned_kills([record(5)], 0) == [{'pid': 5, 'cmdline': 'sglang::scheduler_TP5', 'signal': 'KILL'}]
    assert processes.planned_kills([record(5)], 3)[0]['signal'] == 'TERM'


def drained_elsewhere(dead_at, never=()):
    """Processes an earlier step told to stop (its SIGTERM is not seen here); each dies at its time."""
    clock = FakeClock()
    pids = sorted(set(dead_at) | set(never))
    source = FakeSource(clock, [record(pid) for pid in pids], dict((pid, ('KILL', 0.0)) for pid in pids))
    source.dead_at.update(dead_at)
    # /proc's interval (LocalProcesses): an exit is seen within 0.05 s
    source.poll_max_interval = 0.05
    return source, clock


def test_await_exit_waits_out_a_drain_begun_elsewhere_and_signals_nothing():
    source, clock = drained_elsewhere({10: 0.3, 11: 0.35})
    awaited = processes.await_exit(source, [11, 10, 99], 5, clock=clock, sleep=clock.sleep)
    assert source.sent == [] and awaited.killed == [] and awaited.remaining == []
    assert awaited.report['pids'] == [10, 11, 99] and awaited.report['still_running'] == []
    # seen gone within one poll of the last exit, not after the whole bound
    assert 0.35 <= awaited.report['waited_s'] <= 0.41
    assert awaited.report['gone_at'] is not None


def test_await_exit_kills_what_outstays_its_bound_at_once():
    # It had its SIGTERM and its term_timeout: SIGKILL now, no second SIGTERM and no second wait.
    source, clock = drained_elsewhere({10: 0.2}, never=[11])
    awaited = processes.await_exit(source, [10, 11], 2, clock=clock, sleep=clock.sleep)
    assert source.sent == [(11, 'KILL')]
    assert awaited.report['still_running'] == [11] and awaited.report['waited_s'] == pytest.approx(2.0, abs=0.01)
    assert [entry['signal'] for entry in awaited.killed] == ['KILL'] and awaited.remaining == []
    assert awaited.report['gone_at'] is not None and clock.now < 2.2


def test_await_exit_reports_what_survives_sigkill():
    clock = FakeClock()
    source = FakeSource(clock, [record(11)], {11: None})
    awaited = processes.await_exit(source, [11], 1, kill_timeout=1, clock=clock, sleep=clock.sleep)
    assert [r.pid for r in awaited.remaining] == [11] and awaited.report['gone_at'] is None


def test_await_exit_of_processes_already_gone_or_of_nothing_returns_at_once():
    source, clock = drained_elsewhere({10: 0.0})
    gone = processes.await_exit(source, [10], 5, clock=clock, sleep=clock.sleep)
    assert gone.report['still_running'] == [] and gone.report['waited_s'] == 0.0
    assert gone.report['gone_at'] is not None and source.sent == []
    assert processes.await_exit(source, [], 5, clock=clock, sleep=clock.sleep).report == processes.nothing_awaited()


@pytest.mark.parametrize('cmdline, matched', [
    ('python3 -m sglang.launch_server --model-path /m --port 30000', True),
    ('/opt/sglang/bin/python3.11 -u -m sglang.launch_server --port 30000', True),
    ('/usr/bin/python -X dev -m sglang.srt.entrypoints.http_server', True),
    ('python3 -m sglang.bench_serving --backend sglang', True),
    ('python3 -m sglang.data_parallel_controller', True),
    ('sglang::scheduler_TP0', True),
    ('sglang::detokenizer', True),
    ('python3 -msglang.launch_server --port 30000', True),
    ('/venv/bin/python3 /venv/bin/sglang serve --model-path /m', True),
    ('sglang serve --model-path /m', True),
    ('less /home/ann/sglang serve notes', False),
    ('python3 /home/ann/sglang-serve.py', False),
    # Bystanders whose arguments merely name SGLang (issue 28, item 11): never signalled.
    ('vim /home/ann/notes-on-sglang.srt.md', False),
    ('tail -f /var/log/sglang.bench.log', False),
    ('python3 -c print(1) sglang.srt', False),
    ('python3 /home/ann/run.py -m sglang.srt.x', False),
    ('grep sglang::', False),
    ('python3 -m sglang.launch_serverless', False),
])
def test_default_patterns_match_what_sglang_runs_and_not_what_names_it(cmdline, matched):
    assert bool(processes.select([record(10, cmdline)], SGLANG, protected_pids={1})) is matched


def test_the_roles_kill_patterns_start_with_the_modules_defaults():
    import os
    import yaml
    defaults = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'sglang', 'defaults', 'main.yml')
    with open(defaults) as handle:
        role_patterns = yaml.safe_load(handle)['sglang_kill_patterns']
    assert role_patterns[:3] == processes.DEFAULT_SGLANG_PATTERNS


# --- whose process (issue 44) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize('cgroup, unit', [
    (['0::/system.slice/sglang.service'], 'sglang'),
    (['0::/user.slice/user-1000.slice/user@1000.service/app.slice/job.service'], 'job'),
    (['12:pids:/', '1:name=systemd:/system.slice/sglang-b.service'], 'sglang-b'),
    (['0::/user.slice/user-0.slice/session-3.scope'], None),
    ([], None),
])
def test_the_unit_is_the_innermost_service_of_the_control_group(cgroup, unit):
    assert processes.marks_from([], cgroup).unit == unit


def test_only_the_gpuops_marks_are_read_from_an_environment():
    marks = processes.marks_from(['SECRET=x', 'GPUOPS_SGLANG_SERVICE=sglang', 'GPUOPS_SGLANG_LAUNCH_FILE=/etc/s/launch.json',
                                  'GPUOPS_SGLANG_SERVICE=later'], [])
    assert marks == processes.ProcessMarks('sglang', '/etc/s/launch.json', None)


@pytest.mark.parametrize('cmdline, port', [
    ('python3 -m sglang.launch_server --port 30000 --host 0.0.0.0', 30000),
    ('python3 -m sglang.launch_server --port=30001', 30001),
    ('python3 -m sglang.launch_server --port 1 --port 2', 2),
    ('python3 -m sglang.launch_server --portal 3', None),
    ('sglang::scheduler_TP0', None),
])
def test_the_port_of_a_command_line(cmdline, port):
    assert processes.port_of(cmdline) == port


OWN = processes.ServerMarks('sglang', (30000,), '/etc/sglang/launch.json', 'gpu1')
NEIGHBOUR = processes.ServerMarks('sglang-b', (30001,), '/etc/sglang-b/launch.json', 'gpu1b')


@pytest.mark.parametrize('record, neighbours, spared_because', [
    (processes.ProcessRecord(5, 1, 'S', 'python3 -m sglang.launch_server --port 30000'), [NEIGHBOUR], None),
    (processes.ProcessRecord(5, 1, 'S', 'python3 -m sglang.launch_server --port 30001'), [], 'another server'),
    (processes.ProcessRecord(5, 1, 'S', 'python3 -m sglang.launch_server --port 30001'), [NEIGHBOUR], 'neighbour'),
    (processes.ProcessRecord(5, 1, 'S', 'sglang::scheduler_TP0', marks=processes.ProcessMarks(unit='sglang')),
     [NEIGHBOUR], None),
    (processes.ProcessRecord(5, 1, 'S', 'sglang::scheduler_TP0', marks=processes.ProcessMarks(unit='sglang-b')),
     [NEIGHBOUR], 'neighbour'),
    # Its own service name but another launch file: two servers of one name side by side.
    (processes.ProcessRecord(5, 1, 'S', 'sglang::scheduler_TP0', marks=processes.ProcessMarks(
        'sglang', '/srv/other/launch.json')), [], 'another server'),
    # Nothing tells whose: today's behaviour alone, spared beside a neighbour.
    (processes.ProcessRecord(5, 1, 'S', 'sglang::scheduler_TP0'), [], None),
    (processes.ProcessRecord(5, 1, 'S', 'sglang::scheduler_TP0'), [NEIGHBOUR], 'may be theirs'),
    # A unit that is no server's (cron) tells nothing either way.
    (processes.ProcessRecord(5, 1, 'S', 'sglang::scheduler_TP0', marks=processes.ProcessMarks(unit='cron')), [], None),
])
def test_whose_process_it_is(record, neighbours, spared_because):
    why = processes.ServerOwnership(OWN, neighbours).why_spared(record, {})
    assert (why is None) if spared_because is None else (spared_because in why), why


def test_a_child_is_judged_by_its_nearest_parent_that_carries_marks():
    records = [processes.ProcessRecord(10, 1, 'S', 'python3 -m sglang.launch_server --port 30001'),
               processes.ProcessRecord(11, 10, 'S', '/bin/sh -c run'),
               processes.ProcessRecord(12, 11, 'S', 'sglang::scheduler_TP0'),
               processes.ProcessRecord(20, 1, 'S', 'python3 -m sglang.launch_server --port 30000'),
               processes.ProcessRecord(21, 20, 'S', 'sglang::scheduler_TP0')]
    targets, spared = processes.ServerOwnership(OWN).sort(records, records)
    assert [record.pid for record in targets] == [20, 21]
    assert [entry['pid'] for entry in spared] == [10, 11, 12]
    assert spared[2]['why'].startswith('its parent 10 carries the marks of another server')


def test_without_marks_nor_neighbours_every_match_is_ended_as_before():
    records = [processes.ProcessRecord(10, 1, 'S', 'python3 -m sglang.launch_server --port 30001')]
    ownership = processes.ServerOwnership()
    assert not ownership.judges and ownership.sort(records, records) == (records, [])
