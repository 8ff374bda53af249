#!/usr/bin/env python3
"""gpu_release on a real GPU, side by side with the driver's own release time, in the same run.

    OUT=/tmp/out python3 bench/h200_release.py            (on a GPU host; the device tool runs it there)

For each case, first the driver alone: this script sends the holders the module's first signal
(SIGKILL for term_timeout 0, SIGTERM otherwise) and polls nvidia-smi every 10 ms until every GPU
reads 0 MiB (the driver's release time, the holder's own exit included). Then the
same holder set is released through ansible-playbook and gpu_release, whose `elapsed` is compared
with the driver's time. Cases: one 20 GiB holder with term_timeout 0 (the SIGKILL path) and 3
(a holder that exits on SIGTERM), eight holders of 8 GiB with term_timeout 0, and, where there are
two GPUs, a tensor-parallel-2 set (one holder per GPU). Each case runs --rounds times; the medians
and every sample go to $OUT/h200_release.json. Needs torch on the host and ansible-core (or the
wheels in .whl/, installed to /tmp/site by tests/gpu/real_gpu_check.sh's recipe).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLDER = os.path.join(REPO, 'tests', 'gpu', 'torch_holder.py')
QUERY = ['nvidia-smi', '--query-gpu=index,memory.used', '--format=csv,noheader,nounits']


def used():
    out = subprocess.check_output(QUERY, universal_newlines=True, env=dict(os.environ, LANG='C'))
    return [int(line.split(',')[1]) for line in out.strip().splitlines()]


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
    """The release time without the module: this script signals the holders itself."""
    procs = start_holders(specs, 'exit')
    held = used()
    started = time.monotonic()
    for proc in procs:
        os.kill(proc.pid, signum)
    while any(value > 0 for value in used()):
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    for proc in procs:
        proc.wait()
    return {'held_mib': held, 'elapsed': round(elapsed, 3)}


def module_release(specs, term_timeout, on_term, out):
    procs = start_holders(specs, on_term)
    held = used()
    result_file = os.path.join(out, 'release-result.json')
    started = time.monotonic()
    subprocess.check_call(['ansible-playbook', '-i', 'localhost,', '-c', 'local',
                           '-e', 'ansible_python_interpreter=%s' % sys.executable,
                           '-e', 'term_timeout=%s' % term_timeout, '-e', 'result_file=%s' % result_file,
                           os.path.join(REPO, 'tests', 'gpu', 'release_once.yml')], stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    for proc in procs:
        proc.wait()
    with open(result_file) as handle:
        result = json.load(handle)
    return {'held_mib': held, 'elapsed': result['elapsed'], 'playbook_wall': round(wall, 3),
            'after_mib': [gpu['memory_used_mib'] for gpu in result['gpus']],
            'signals': sorted(set(k['signal'] for k in result['killed'])), 'killed': len(result['killed'])}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    out = os.environ.get('OUT', '/tmp/h200-release')
    os.makedirs(out, exist_ok=True)
    gpus = len(used())
    cases = [('one holder, SIGKILL path (term_timeout 0)', [(0, 20)], 0, 'exit'),
             ('one holder exiting on SIGTERM (term_timeout 3)', [(0, 20)], 3, 'exit'),
             ('eight holders of 8 GiB, term_timeout 0', [(0, 8)] * 8, 0, 'exit')]
    if gpus >= 2:
        cases.append(('tensor-parallel-2 set across two GPUs, term_timeout 0', [(0, 20), (1, 20)], 0, 'exit'))
    report = {'gpus': gpus, 'driver': subprocess.check_output(
        ['nvidia-smi', '--query-gpu=driver_version,name', '--format=csv,noheader'], universal_newlines=True).strip(),
        'cases': []}
    for name, specs, term_timeout, on_term in cases:
        # The same first signal as the module sends: SIGKILL for term_timeout 0, SIGTERM otherwise.
        signum = signal.SIGKILL if term_timeout == 0 else signal.SIGTERM
        driver = [driver_release(specs, signum) for _ in range(args.rounds)]
        module = [module_release(specs, term_timeout, on_term, out) for _ in range(args.rounds)]
        case = {'case': name, 'driver': driver, 'module': module,
                'driver_median_s': statistics.median(d['elapsed'] for d in driver),
                'module_median_s': statistics.median(m['elapsed'] for m in module)}
        case['module_minus_driver_s'] = round(case['module_median_s'] - case['driver_median_s'], 3)
        report['cases'].append(case)
        print('%-55s driver %.3f s  gpu_release %.3f s  (+%.3f s)  held %s MiB  after %s' % (
            name, case['driver_median_s'], case['module_median_s'], case['module_minus_driver_s'],
            module[0]['held_mib'], module[0]['after_mib']), flush=True)
    with open(os.path.join(out, 'h200_release.json'), 'w') as handle:
        json.dump(report, handle, indent=1)


if __name__ == '__main__':
    main()
