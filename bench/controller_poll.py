#!/usr/bin/env python3
"""The controller's CPU for one forced redeploy of the lab at several `internal_poll_interval` values.

    .venv/bin/python bench/controller_poll.py [--intervals 0.001,0.01] [--rounds 3] [--inventory inventory/lab]

The lab must be up and converged (lab/lab up; ansible-playbook -i inventory/lab playbooks/redeploy.yml). Each
round runs `ansible-playbook playbooks/redeploy.yml -e sglang_force_restart=true` once per interval, alternated,
each with a copy of the checkout's ansible.cfg that differs only in `internal_poll_interval` (ansible-core reads
it from a config file only). The controller's CPU is the run's own and its children's (its forked workers, ssh):
what `/usr/bin/time` reports. Prints a line per run and, last, one JSON object: {intervals: {VALUE: {cpu_s:
[...], wall_s: [...], median_cpu_s, median_wall_s}}}. Exit status 0 only when every run succeeded.
Loopback only: the lab's hosts are 127.0.0.N.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, '.venv', 'bin')


def config_with(interval, folder):
    """A copy of ansible.cfg with the interval set and its relative paths made absolute (it lives elsewhere)."""
    with open(os.path.join(REPO, 'ansible.cfg')) as handle:
        text = handle.read()
    text = re.sub(r'^internal_poll_interval = .*$', '', text, flags=re.M)
    text = text.replace('[defaults]\n', '[defaults]\ninternal_poll_interval = %s\n' % interval, 1)
    for key in ('collections_path', 'roles_path'):
        text = re.sub(r'^%s = (.*)$' % key, lambda m: '%s = %s' % (key, os.path.join(REPO, m.group(1))), text,
                      flags=re.M)
    path = os.path.join(folder, 'ansible-%s.cfg' % interval)
    with open(path, 'w') as handle:
        handle.write(text)
    return path


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(config, inventory):
    env = dict(os.environ, ANSIBLE_CONFIG=config)
    argv = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory, os.path.join(REPO, 'playbooks', 'redeploy.yml'),
            '-e', 'sglang_force_restart=true']
    cpu, began = children_cpu(), time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    return done, children_cpu() - cpu, time.monotonic() - began


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--intervals', default='0.001,0.01')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--inventory', default=os.path.join(REPO, 'inventory', 'lab'))
    args = parser.parse_args(argv)
    intervals = [value.strip() for value in args.intervals.split(',') if value.strip()]
    for value in intervals:
        if float(value) <= 0:
            parser.error('each interval must be a positive number of seconds: %r' % value)
    found = dict((value, {'cpu_s': [], 'wall_s': []}) for value in intervals)
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        configs = dict((value, config_with(value, folder)) for value in intervals)
        for round_number in range(1, args.rounds + 1):
            for value in intervals:
                done, cpu, wall = one_run(configs[value], args.inventory)
                if done.returncode != 0:
                    ok = False
                    print(done.stdout[-3000:], file=sys.stderr)
                found[value]['cpu_s'].append(round(cpu, 2))
                found[value]['wall_s'].append(round(wall, 2))
                print('round %d  interval %-6s  rc %d  controller CPU %5.2f s  wall %5.2f s'
                      % (round_number, value, done.returncode, cpu, wall), flush=True)
    for figures in found.values():
        figures['median_cpu_s'] = statistics.median(figures['cpu_s'])
        figures['median_wall_s'] = statistics.median(figures['wall_s'])
    print(json.dumps({'intervals': found}, sort_keys=True))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
