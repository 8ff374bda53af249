#!/usr/bin/env python3
"""make bench-tune: the speculation tuner (playbooks/tune_speculation.yml) on the lab's gpu2, for the stand-in's
default draft acceptance and for others (LAB_STANDIN_ACCEPT_RATE, through sglang_environment), timed.

    .venv/bin/python bench/tune.py [--rates default,0.6,0.95] [--levels 1,2,4,8,16,32,64] [--requests 64]
                                   [--tokens 32] [--out docs/measurements/DATE-tune.json]

The lab must be up and converged (lab/lab up; ansible-playbook -i inventory/lab playbooks/redeploy.yml). For
each rate: one tuning run of gpu2 (every level benchmarked in plain decoding and EAGLE-3, the previous server
restored), its wall time, its table and recommendation; then a plain redeploy of gpu2 must change nothing
(the tuner left it as it was). Prints each table and, as its last line, one JSON object (also written to --out):
{rates: {RATE: {seconds, threshold, adaptive_config, levels, redeploy_after_changed}}}. Exit status 0 only when
every run succeeded and left gpu2 unchanged. Loopback only: the lab's hosts are 127.0.0.N.
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, '.venv', 'bin')
INVENTORY = os.path.join(REPO, 'inventory', 'lab')
REPORTS = os.path.join(REPO, '.cache', 'lab', 'reports')


def playbook(name, extravars, limit='gpu2'):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))
    argv = [os.path.join(BIN, 'ansible-playbook'), '-i', INVENTORY, os.path.join(REPO, 'playbooks', name),
            '--limit', limit, '-e', json.dumps(extravars)]
    return subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rates', default='default,0.6,0.95')
    parser.add_argument('--levels', default='1,2,4,8,16,32,64')
    parser.add_argument('--requests', type=int, default=64)
    parser.add_argument('--tokens', type=int, default=32)
    parser.add_argument('--out', default=os.path.join(REPO, 'docs', 'measurements',
                                                      time.strftime('%Y-%m-%d') + '-tune.json'))
    args = parser.parse_args(argv)
    levels = [int(level) for level in args.levels.split(',')]
    found, ok = {}, True
    for rate in args.rates.split(','):
        extravars = {'sglang_tune_levels': levels, 'sglang_tune_requests': args.requests,
                     'sglang_tune_max_new_tokens': args.tokens, 'sglang_tune_timeout': 120}
        if rate != 'default':
            extravars['sglang_environment'] = {'LAB_STANDIN_ACCEPT_RATE': rate}
        began = time.monotonic()
        run = playbook('tune_speculation.yml', extravars)
        seconds = round(time.monotonic() - began, 1)
        if run.returncode != 0:
            print(run.stdout[-3000:], file=sys.stderr)
            found[rate] = {'seconds': seconds, 'failed': True}
            ok = False
            continue
        with open(os.path.join(REPORTS, 'gpu2.speculation.json')) as handle:
            table = json.load(handle)
        after = playbook('redeploy.yml', {})
        changed = after.returncode != 0 or 'gpu2: unchanged' not in after.stdout
        ok = ok and not changed
        print('acceptance %s (%.1f s):\n%s' % (rate, seconds, run.stdout.split('SPECULATION TUNING')[-1]
                                                .split('PLAY RECAP')[0].strip('*\n ')))
        found[rate] = {'seconds': seconds, 'threshold': table['recommended']['threshold'],
                       'adaptive_config': table['recommended']['adaptive_config'], 'levels': table['levels'],
                       'notes': table['recommended']['notes'], 'redeploy_after_changed': changed}
    result = {'levels': levels, 'requests': args.requests, 'max_new_tokens': args.tokens, 'rates': found}
    with open(args.out, 'w') as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write('\n')
    print(json.dumps(result, sort_keys=True))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
