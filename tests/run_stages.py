"""make test: every stage of the suite, independent ones side by side, each lab stage on its own lab.

Much of a lab test's time is waiting (for a guard's bound, a server's warm-up, a drain), so the stages run side by
side, longest first (together they keep the 2 cores busy: docs/benchmarks.md says where the CPU goes), as long as
their weights fit --capacity: a stage's weight is how many of the 2 cores it keeps busy (a lab stage 1, the unit and
integration suites' pytest -n 3 2). The capacity is 5 since the integration suite runs its modules without
ansible-playbook (2026-12-06, `fe248ac`: 939 s for the stages, the machine busy 1578 CPU seconds, against 1490 s and
2894 at 4 with the suite's old CPU, docs/benchmarks.md); with the old suite more at once measured a load average of 20, which stretched
the lab's redeploys past their bounds and the tests' own waits; each lab
stage brings up its own lab (LAB_INSTANCE 1..: lab/lab), molecule uses the default one (0), the stages without a lab
need none. Labs come up one at a time (tests/helpers/lab_instance.py, one_start_at_a_time; molecule's create takes
the same lock), and the stages that only compute and assert no time (sanity, ansible-test integration, galaxy-check,
lint) run at a lower priority (nice 10), so a redeploy in a lab stage is not stretched past its lab's bounds. Stages
that share a resource never overlap: `ansible-home` is the venv's .ansible folder that ansible-lint and molecule
(ansible-compat) rebuild, and that the integration suite's molecule doc test reads.

Each stage's output goes to .cache/test-stages/NAME.log; a line says when each starts and ends; at the end a table
of every stage's time and exit status, then the last lines of each failed stage's log. Exits 1 when any stage
failed (a pytest that collected nothing exits 5: a failure too), 0 when all passed.

    tests/run_stages.py [--capacity N] [STAGE ...]     (no STAGE: all of them; --list: their names)
"""
import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, '.venv', 'bin')
LOGS = os.path.join(REPO, '.cache', 'test-stages')
PYTEST = [os.path.join(BIN, 'pytest'), '-q', '-p', 'no:cacheprovider', '--durations=15']


class Stage(object):
    def __init__(self, name, argv, lab=None, resources=(), weight=1, env=None):
        self.name, self.argv, self.lab, self.resources, self.weight = name, argv, lab, frozenset(resources), weight
        self.env = env or {}
        self.proc = self.started = self.took = self.rc = self.cpu = None

    @property
    def log(self):
        return os.path.join(LOGS, self.name + '.log')

    def start(self):
        env = dict(os.environ, **self.env)
        if self.lab is not None:
            env['LAB_INSTANCE'] = str(self.lab)
        self.started = time.monotonic()
        with open(self.log, 'wb') as out:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT)


def lab_files(*names):
    return [os.path.join('tests', 'lab', name) for name in names]


def make(target):
    return ['make', '--no-print-directory', target]


def background(name, argv, **kwargs):
    """A stage that asserts no time: it yields the CPU to those that do (nice 10), so it weighs nothing."""
    return Stage(name, ['nice', '-n', '10'] + argv, weight=0, **kwargs)


LAB_START_LOCK = os.path.join(REPO, '.cache', 'lab-start.lock')


# Longest first (docs/benchmarks.md, "The test suite"): a slow stage started last would set the total.
def stages():
    return [
        # Four lab stages of about the same length, the longest started first; the unit and integration suites, now
        # a few minutes (run_task runs a module as its own process: tests/helpers/ansible_run.py), start beside the
        # first two and the dashboard, and the other two lab stages start when they end (docs/benchmarks.md, "The
        # test suite").
        Stage('lab-fleet', PYTEST + lab_files('test_fleet.py', 'test_multinode.py'), lab=4),
        Stage('lab-lease', PYTEST + lab_files('test_lease.py', 'test_canary_bake.py'), lab=1),
        # Three workers at the weight of 2: a third of the integration suite's time is waiting on a bound or a server.
        Stage('unit-integration', PYTEST + ['-n', '3', 'tests/unit', 'tests/integration'], weight=2,
              resources=['ansible-home']),
        Stage('dashboard', PYTEST + ['tests/dashboard'], lab=5),
        # The tuner's tests end lab-redeploy, the undo's scenario (seven windows under load) lab-window: on the lab
        # each stage's session already started.
        Stage('lab-redeploy', PYTEST + lab_files('test_redeploy_scenarios.py', 'test_performance_gate.py',
                                                 'test_doc_commands.py', 'test_speculation_tuning.py'), lab=3),
        # test_colocated.py brings up a lab of its own (the colocated shape) on an instance no other stage uses.
        Stage('lab-window', PYTEST + lab_files('test_outage_window.py', 'test_colocated.py', 'test_undo.py'), lab=2,
              env={'LAB_COLOCATED_INSTANCE': '6'}),
        background('sanity', make('sanity')),
        background('integration-targets', make('integration-targets')),
        # The Galaxy importer's ansible-lint keeps its caches in the importer's own venv: not ansible-home.
        background('galaxy-check', make('galaxy-check')),
        background('lint', make('lint'), resources=['ansible-home']),
        Stage('molecule', ['flock', LAB_START_LOCK] + make('molecule'), lab=0, resources=['ansible-home']),
    ]


def run(selected, capacity):
    os.makedirs(LOGS, exist_ok=True)
    pending, running, done = list(selected), [], []
    begun = time.monotonic()
    while pending or running:
        busy = set().union(*[stage.resources for stage in running]) if running else set()
        load = sum(stage.weight for stage in running)
        for stage in list(pending):
            if stage.resources & busy or (load + stage.weight > capacity and stage.weight > 0):
                continue
            stage.start()
            busy |= stage.resources
            load += stage.weight
            pending.remove(stage)
            running.append(stage)
            print('[%6.1f s] start  %s' % (time.monotonic() - begun, stage.name), flush=True)
        time.sleep(0.5)
        for stage in list(running):
            # wait4: the stage's own CPU time (its processes', not the containers'), for the table.
            pid, status, usage = os.wait4(stage.proc.pid, os.WNOHANG)
            if pid:
                stage.proc.returncode = stage.rc = os.waitstatus_to_exitcode(status)
                stage.took, stage.cpu = time.monotonic() - stage.started, usage.ru_utime + usage.ru_stime
                running.remove(stage)
                done.append(stage)
                print('[%6.1f s] %s %s (%.0f s)' % (time.monotonic() - begun, 'passed' if stage.rc == 0 else
                                                    'FAILED', stage.name, stage.took), flush=True)
    return done, time.monotonic() - begun


def report(done, wall):
    print('\n%-20s %8s %8s %4s' % ('stage', 'seconds', 'cpu s', 'rc'))
    for stage in done:
        print('%-20s %8.0f %8.0f %4d' % (stage.name, stage.took, stage.cpu, stage.rc))
    print('%-20s %8.0f %8.0f' % ('all (wall clock)', wall, sum(stage.cpu for stage in done)))
    failed = [stage for stage in done if stage.rc != 0]
    for stage in failed:
        with open(stage.log, errors='replace') as handle:
            tail = handle.read()[-6000:]
        print('\n==== %s FAILED (rc %d); the end of %s:\n%s' % (stage.name, stage.rc, stage.log, tail))
    if failed:
        print('\nFAILED: %s' % ', '.join(stage.name for stage in failed))
    return 1 if failed else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--capacity', type=int, default=int(os.environ.get('TEST_CAPACITY', '5')),
                        help='how much weight may run at once (default 5, TEST_CAPACITY)')
    parser.add_argument('--list', action='store_true')
    parser.add_argument('stage', nargs='*')
    args = parser.parse_args(argv)
    known = stages()
    if args.list:
        print('\n'.join(stage.name for stage in known))
        return 0
    unknown = set(args.stage) - set(stage.name for stage in known)
    if unknown:
        parser.error('no such stage: %s (--list names them)' % ', '.join(sorted(unknown)))
    selected = [stage for stage in known if not args.stage or stage.name in args.stage]
    done, wall = run(selected, max(2, args.capacity))
    return report(done, wall)


if __name__ == '__main__':
    sys.exit(main())
