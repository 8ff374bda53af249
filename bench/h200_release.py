#!/usr/bin/env python3
"""gpu_release on a real GPU, side by side with the driver's own release time, in the same run.

    OUT=/tmp/out python3 bench/h200_release.py            (on a GPU host; the device tool runs it there)
    OUT=/tmp/out python3 bench/h200_release.py --rounds 6 --variant before=/tmp/before --variant after=/tmp/after

For each case and round, first the driver alone: this script sends the holders the module's first
signal (SIGKILL for term_timeout 0, SIGTERM otherwise) and polls nvidia-smi every 10 ms until every GPU
reads 0 MiB (the driver's release time, the holder's own exit included), while a thread polls /proc
every 2 ms for the moment the holders are gone (dead or zombie: this script reaps them only later).
Then the same holder set is released through ansible-playbook and gpu_release, once per --variant (a
collections root holding gpuops/sglang; default: this checkout), back to back in the same round, so
that variants meet the same machine state. Each module run's `elapsed` is compared with the driver's
time of its round, and its `timeline` (signals, /proc polls, GPU readings) is kept. Cases: one 20 GiB
holder with term_timeout 0 (the SIGKILL path) and 3 (a holder that exits on SIGTERM), eight holders
of 8 GiB with term_timeout 0, and, where there are two GPUs, a tensor-parallel-2 set (one holder per
GPU). Every sample goes to $OUT/h200_release.json. Needs torch on the host and ansible-core (or the
wheels in .whl/, installed to /tmp/site by tests/gpu/real_gpu_check.sh's recipe).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLDER = os.path.join(REPO, 'tests', 'gpu', 'torch_holder.py')
QUERY = ['nvidia-smi', '--query-gpu=index,memory.used', '--format=csv,noheader,nounits']


def used():
    out = subprocess.check_output(QUERY, universal_newlines=True, env=dict(os.environ, LANG='C'))
    return [int(line.split(',')[1]) for line in out.strip().splitlines()]


def gone(pid):
    """Dead or a zombie: the process holds no memory and no files any more."""
    try:
        with open('/proc/%d/stat' % pid) as stat:
            text = stat.read()
    except OSError:
        return True
    return text[text.rfind(')') + 2] in 'ZX'


def start_holders(specs, on_term):
    """specs: [(gpu_index, gib)]; returns the processes once every one holds its memory."""
    procs, ready = [], []
    for n, (gpu, gib) in enumerate(specs):
        flag = '/tmp/holder-ready-%d-%d' % (os.getpid(), n)
        if os.path.exists(flag):
            os.unlink(flag)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
        procs.append(subprocess.Popen([sys.executable, HOLDER, str(gib), on_term, flag], env=env))
        ready.append(flag)
    deadline = time.monotonic() + 120
    while not all(os.path.exists(flag) for flag in ready):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit('holders did not start')
        time.sleep(0.05)
    for flag in ready:
        os.unlink(flag)
    return procs


def driver_release(specs, signum):
    """The release time without the module: this script signals the holders itself.

    Also when the holders were gone from /proc (polled every 2 ms by a thread), and how long each
    nvidia-smi call took: a slow exit or a slow call shows here as well as in the module's run.
    """
    procs = start_holders(specs, 'exit')
    held = used()
    pids = [proc.pid for proc in procs]
    seen = {}

    def watch():
        while not all(gone(pid) for pid in pids):
            time.sleep(0.002)
        seen['gone'] = time.monotonic()

    watcher = threading.Thread(target=watch)
    started = time.monotonic()
    for pid in pids:
        os.kill(pid, signum)
    watcher.start()
    calls = []
    while True:
        call = time.monotonic()
        values = used()
        calls.append(round(time.monotonic() - call, 3))
        if all(value == 0 for value in values):
            break
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    watcher.join(10)
    for proc in procs:
        proc.wait()
    return {'held_mib': held, 'elapsed': round(elapsed, 3),
            'gone_s': round(seen['gone'] - started, 3) if 'gone' in seen else None,
            'smi_calls': len(calls), 'smi_max_s': max(calls), 'smi_median_s': statistics.median(calls)}


def module_release(specs, term_timeout, on_term, out, collections, reader=None):
    procs = start_holders(specs, on_term)
    held = used()
    result_file = os.path.join(out, 'release-result.json')
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections)
    started = time.monotonic()
    subprocess.check_call(['ansible-playbook', '-i', 'localhost,', '-c', 'local',
                           '-e', 'ansible_python_interpreter=%s' % sys.executable,
                           '-e', 'term_timeout=%s' % term_timeout, '-e', 'result_file=%s' % result_file,
                           '-e', 'release_timeout=20'] + (['-e', 'memory_reader=%s' % reader] if reader else []) + [
                           os.path.join(REPO, 'tests', 'gpu', 'release_once.yml')], stdout=subprocess.DEVNULL, env=env)
    wall = time.monotonic() - started
    for proc in procs:
        proc.wait()
    with open(result_file) as handle:
        result = json.load(handle)
    return {'held_mib': held, 'elapsed': result['elapsed'], 'failed': bool(result.get('failed')),
            'msg': result.get('msg'), 'memory_reader': result.get('memory_reader'), 'playbook_wall': round(wall, 3),
            'after_mib': [gpu['memory_used_mib'] for gpu in result['gpus']],
            'signals': sorted(set(k['signal'] for k in result['killed'])), 'killed': len(result['killed']),
            'timeline': result.get('timeline')}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--variant', action='append', default=[],
                        help='NAME=COLLECTIONS_ROOT[,MEMORY_READER] (repeatable); '
                        'default: module=$ANSIBLE_COLLECTIONS_PATH')
    parser.add_argument('--budget-s', type=float, default=0,
                        help='start no new round after this many seconds (0: no limit)')
    parser.add_argument('--cases', default='kill,term,eight,tp2')
    args = parser.parse_args()
    variants = [(spec.split('=', 1)[0],) + tuple((spec.split('=', 1)[1] + ',').split(',')[:2])
                for spec in args.variant] or \
        [('module', os.environ.get('ANSIBLE_COLLECTIONS_PATH', os.path.join(REPO, '.cache', 'collections')), '')]
    out = os.environ.get('OUT', '/tmp/h200-release')
    os.makedirs(out, exist_ok=True)
    gpus = len(used())
    cases = [('kill', 'one holder, SIGKILL path (term_timeout 0)', [(0, 20)], 0),
             ('term', 'one holder exiting on SIGTERM (term_timeout 3)', [(0, 20)], 3),
             ('eight', 'eight holders of 8 GiB, term_timeout 0', [(0, 8)] * 8, 0)]
    if gpus >= 2:
        cases.append(('tp2', 'tensor-parallel-2 set across two GPUs, term_timeout 0', [(0, 20), (1, 20)], 0))
    cases = [case for case in cases if case[0] in args.cases.split(',')]
    report = {'gpus': gpus, 'variants': dict((name, [root, reader]) for name, root, reader in variants),
              'driver': subprocess.check_output(
        ['nvidia-smi', '--query-gpu=driver_version,name,persistence_mode', '--format=csv,noheader'],
        universal_newlines=True).strip(), 'cases': []}
    began = time.monotonic()
    for key, name, specs, term_timeout in cases:
        # The same first signal as the module sends: SIGKILL for term_timeout 0, SIGTERM otherwise.
        signum = signal.SIGKILL if term_timeout == 0 else signal.SIGTERM
        case = {'case': name, 'key': key, 'rounds': []}
        report['cases'].append(case)
        for number in range(args.rounds):
            if args.budget_s and time.monotonic() - began > args.budget_s and number >= 1:
                print('budget spent: %s stops after %d rounds' % (key, number), flush=True)
                break
            row = {'driver': driver_release(specs, signum)}
            for variant, collections, reader in variants:
                row[variant] = module_release(specs, term_timeout, 'exit', out, collections, reader or None)
            case['rounds'].append(row)
            print('%-6s round %d  driver %.3f s (gone %s s, nvidia-smi max %.3f s)  %s' % (
                key, number + 1, row['driver']['elapsed'], row['driver']['gone_s'], row['driver']['smi_max_s'],
                '  '.join('%s %.3f s (%+.3f)' % (variant, row[variant]['elapsed'],
                                                row[variant]['elapsed'] - row['driver']['elapsed'])
                          for variant, _, _ in variants)), flush=True)
        for variant, _, _ in variants:
            over = [row[variant]['elapsed'] - row['driver']['elapsed'] for row in case['rounds']]
            case[variant + '_worst_over_driver_s'] = round(max(over), 3) if over else None
        with open(os.path.join(out, 'h200_release.json'), 'w') as handle:
            json.dump(report, handle, indent=1)


if __name__ == '__main__':
    main()
