#!/usr/bin/env python3
"""Outage of a group redeploy against a plain restart of both ranks, on the lab's two-node server.

    lab/lab up --multinode && .venv/bin/python bench/multinode_outage.py [--rounds 3]

Rank 0 (mn1, 127.0.0.31) is probed from outside every 50 ms twice over, by its own thread each: /health,
and a real one-token POST /generate (which needs every rank: rank 0 answers /health after a rank died). An
outage is the longest run of failed probes during one variant. Variants, alternated round by round:

  restart     both ranks restarted by hand over ssh, as an operator who knows the group would: both stopped
              at once (SIGTERM to rank 0's detached session, waited for, on mn1; `systemctl stop sglang` on
              mn2), then both started at once (rank 0 as the launcher does, `systemctl start sglang`). No
              check, no GPU proof, no rollback: the floor a careful manual restart costs.
  redeploy    ansible-playbook -i inventory/lab-multinode playbooks/redeploy.yml -e sglang_force_restart=true

Prints each round and the medians; writes bench/results/multinode-outage-*.json. Loopback only.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from outage import DETACHED_RESTART, ENV, REPO, SSH, Probe  # noqa: E402  (bench/ is not a package)

RANK0, RANK1 = '127.0.0.31', '127.0.0.32'
INTERVAL = 0.05


class GenerateProbe(Probe):
    """Probe's loop and outage arithmetic over a one-token generation instead of /health."""

    def loop(self):
        body = json.dumps({'text': 'ping', 'sampling_params': {'max_new_tokens': 1}}).encode()
        while self.running:
            started = time.monotonic()
            request = urllib.request.Request(self.url, data=body, headers={'Content-Type': 'application/json'})
            try:
                with urllib.request.urlopen(request, timeout=2) as response:
                    ok = response.status == 200 and 'text' in json.load(response)
            except (OSError, ValueError):
                ok = False
            self.samples.append((started, ok))
            time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))


def ssh(address, script):
    subprocess.run(SSH + ['root@' + address, script], check=True, stdout=subprocess.DEVNULL)


# DETACHED_RESTART's two halves: the stop (SIGTERM the session, wait), then the start.
RANK0_STOP, RANK0_START = DETACHED_RESTART.split('setsid', 1)
RANK0_START = 'setsid' + RANK0_START


def at_once(*calls):
    threads = [threading.Thread(target=ssh, args=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def plain_restart():
    # Stopped together, then started together: a rank restarted under a running peer would join a group
    # that lost it (rank 0 refuses a rank that comes back), as upstream's ranks do.
    at_once((RANK0, RANK0_STOP), (RANK1, 'systemctl stop sglang'))
    at_once((RANK0, RANK0_START), (RANK1, 'systemctl start sglang'))


def group_redeploy():
    done = subprocess.run(['ansible-playbook', '-i', os.path.join(REPO, 'inventory', 'lab-multinode'),
                           os.path.join(REPO, 'playbooks', 'redeploy.yml'), '-e', 'sglang_force_restart=true'],
                          env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if done.returncode != 0:
        sys.exit('the group redeploy failed:\n' + done.stdout[-3000:])


def measured(action):
    probes = {'health': Probe(RANK0), 'generate': GenerateProbe(RANK0)}
    probes['generate'].url = 'http://%s:30000/generate' % RANK0
    for probe in probes.values():
        probe.__enter__()
    time.sleep(0.3)
    action()
    # Judged from outside: probing goes on until rank 0 generates again.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(p.samples and p.samples[-1][1] for p in probes.values()):
        time.sleep(0.05)
    time.sleep(0.3)
    for probe in probes.values():
        probe.__exit__()
    return dict((name, round(probe.outage(), 3)) for name, probe in probes.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    variants = [('restart', plain_restart), ('redeploy', group_redeploy)]
    results = dict((name, []) for name, _ in variants)
    for number in range(1, args.rounds + 1):
        order = variants if number % 2 else list(reversed(variants))
        for name, action in order:
            results[name].append(measured(action))
            print('round %d %-9s /health %.2f s  /generate %.2f s' % (
                number, name, results[name][-1]['health'], results[name][-1]['generate']), flush=True)
    summary = dict((name, dict((probe, statistics.median(run[probe] for run in runs)) for probe in ('health', 'generate')))
                   for name, runs in results.items())
    for name, medians in summary.items():
        print('median %-9s /health %.2f s  /generate %.2f s' % (name, medians['health'], medians['generate']))
    folder = os.path.join(REPO, 'bench', 'results')
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, 'multinode-outage-%s.json' % datetime.datetime.now().strftime('%Y%m%dT%H%M%S'))
    with open(path, 'w') as handle:
        json.dump({'rounds': results, 'median': summary, 'probe_interval_s': INTERVAL}, handle, indent=2)
    print(path)


if __name__ == '__main__':
    main()
