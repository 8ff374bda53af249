import os
import re
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils import _processes as processes
from ansible_collections.gpuops.sglang.plugins.module_utils._pct import parse_ps

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures')


def read_fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class FakeClock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeSource(object):
    """Processes that die after a given signal once enough fake time passed."""

    def __init__(self, clock, records, dies_on):
        self.clock = clock
        self.records = dict((record.pid, record) for record in records)
        self.dies_on = dies_on  # pid -> (signal name, seconds after it) or None: never dies
        self.dead_at = {}
        self.sent = []

    def list(self):
        return [record for pid, record in sorted(self.records.items()) if not self._dead(pid)]

    def signal(self, records, signame):
        for record in records:
            self.sent.append((record.pid, signame))
            rule = self.dies_on.get(record.pid)
            if signame == 'KILL' and rule is not None and rule[0] != 'KILL':
                rule = ('KILL', 0.0)
            if rule is not None and rule[0] == signame and record.pid not in self.dead_at:
                self.dead_at[record.pid] = self.clock() + rule[1]

    def _dead(self, pid):
        return pid in self.dead_at and self.clock() >= self.dead_at[pid]

    def alive(self, records):
        return [record for record in records if not self._dead(record.pid)]


def record(pid, cmdline, state='S'):
    return processes.ProcessRecord(pid, 1, state, cmdline)


def run_policy(dies_on, term_timeout, kill_timeout=10.0):
    clock = FakeClock()
    targets = [record(pid, 'sglang::scheduler_TP%d' % pid) for pid in sorted(dies_on)]
    source = FakeSource(clock, targets, dies_on)
    outcome = processes.terminate(source, targets, term_timeout, kill_timeout, clock=clock, sleep=clock.sleep)
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


def test_select_matches_full_cmdline_dedupes_and_skips_protected_and_zombies():
    records = parse_ps(read_fixture('ps-container.txt'))
    records.append(records[2])  # same PID listed twice, as `ps aux | grep` pipelines did
    records.append(processes.ProcessRecord(77, 1, 'Z', 'sglang::scheduler_TP1'))
    patterns = processes.compile_patterns(processes.DEFAULT_SGLANG_PATTERNS)
    chosen = processes.select(records, patterns, protected_pids={44})
    assert [r.pid for r in chosen] == [43, 51]
    assert all('nightly_eval' not in r.cmdline for r in chosen)


def test_invalid_pattern_names_the_pattern():
    with pytest.raises(ValueError, match=re.escape("'sglang::('")):
        processes.compile_patterns(['sglang::('])


def test_read_proc_record_of_real_process_with_title(tmp_path):
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        rec = processes.read_proc_record(child.pid)
        assert rec.pid == child.pid
        assert rec.ppid == os.getpid()
        assert rec.cmdline.endswith('import time; time.sleep(60)')
    finally:
        child.kill()
        child.wait()
    assert processes.read_proc_record(child.pid) is None


def test_protected_pids_cover_self_and_ancestors():
    guarded = processes.protected_pids()
    assert os.getpid() in guarded
    assert os.getppid() in guarded
    assert 1 in guarded or len(guarded) > 1


def test_local_source_finds_holders_of_a_file_and_kills_them(tmp_path):
    device = tmp_path / 'nvidia0'
    device.write_text('')
    holder = subprocess.Popen([sys.executable, '-c',
                               'import sys, time; f = open(sys.argv[1]); print("ok", flush=True); time.sleep(60)',
                               str(device)], stdout=subprocess.PIPE)
    bystander = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        holder.stdout.readline()
        local = processes.LocalProcesses()
        holders = local.holders([str(device)])
        assert holders == {holder.pid: [str(device)]}
        target = processes.read_proc_record(holder.pid)
        outcome = processes.terminate(local, [target], term_timeout=5)
        assert outcome.remaining == []
        assert holder.wait(timeout=5) == -15
        assert bystander.poll() is None
    finally:
        for proc in (holder, bystander):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_signal_skips_a_reused_pid(tmp_path):
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        stale = processes.ProcessRecord(child.pid, 1, 'S', 'sglang::scheduler_TP0')
        processes.LocalProcesses().signal([stale], 'KILL')
        time.sleep(0.1)
        assert child.poll() is None
        assert processes.LocalProcesses().alive([stale]) == []
    finally:
        child.kill()
        child.wait()
