#!/usr/bin/env python3
"""make fleet: a rolling redeploy of an eight-host lab behind its gateway (smg 1.13), under a steady load.

    .venv/bin/python bench/fleet.py [--hosts 8] [--rate 20] [--concurrency 16] [--serial 2] [--bake SECONDS]

Starts the lab with --hosts gpu hosts (LAB_GPU_HOSTS) and its router (smg, started by lab/lab), converges
it once (so the measured run starts from serving servers), then starts bench/load.py (a bounded stream of POST /generate through the
router, every host's /health sampled every 100 ms), runs playbooks/redeploy.yml with batches of --serial and
at most --serial servers unavailable, forcing a restart of every host (sglang_force_restart: every server is
stopped and started again), stops the load, and prints as its last line one JSON object: hosts,
requests_total, requests_failed, min_healthy, wall_s (the redeploy's wall time), plus the per-host status
of the run's reports and the load's first failures. With --bake, gpu1 is a canary of its own batch that bakes
for that long under the load (sglang_canary_bake; every server converged with --enable-metrics first), and the
line adds its verdict. Exit status 0 only when the redeploy succeeded and no request failed. Loopback only: the router and every server are on 127.0.0.0/8.
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, '.venv', 'bin')
ROUTER = 'http://127.0.0.1:30080'


def lab(*argv, **env):
    return subprocess.run([os.path.join(REPO, 'lab', 'lab')] + list(argv), env=dict(os.environ, **env),
                          check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout


def playbook(inventory_args, extravars, log):
    argv = [os.path.join(BIN, 'ansible-playbook')] + inventory_args + [
        os.path.join(REPO, 'playbooks', 'redeploy.yml'), '-e', json.dumps(extravars)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'))
    with open(log, 'w') as handle:
        return subprocess.run(argv, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=8)
    parser.add_argument('--rate', type=float, default=20.0)
    parser.add_argument('--concurrency', type=int, default=16)
    parser.add_argument('--serial', type=int, default=2)
    parser.add_argument('--bake', type=float, default=0, help='seconds of the canary bake (0: none)')
    args = parser.parse_args()
    # The bake reads every server's /metrics: the fleet exports them from the converging run on.
    metrics = {'sglang_enable_metrics': True} if args.bake > 0 else {}

    lab('up', LAB_GPU_HOSTS=str(args.hosts))
    inventory_args = lab('inventory').split()
    state = os.path.join(REPO, '.cache', 'fleet')
    os.makedirs(state, exist_ok=True)
    # Converged first: the measured run starts from a fleet that serves the wanted configuration.
    if playbook(inventory_args, metrics, os.path.join(state, 'converge.log')) != 0:
        sys.exit('the converging run failed: see %s' % os.path.join(state, 'converge.log'))

    hosts = ['gpu%d' % index for index in range(1, args.hosts + 1)]
    health = ['--health=http://127.0.0.%d:30000/health' % (11 + index) for index in range(1, args.hosts + 1)]
    stop_file = os.path.join(state, 'stop-load')
    if os.path.exists(stop_file):
        os.unlink(stop_file)
    load = subprocess.Popen([sys.executable, os.path.join(REPO, 'bench', 'load.py'), '--url', ROUTER,
                             '--rate', str(args.rate), '--concurrency', str(args.concurrency),
                             '--stop-file', stop_file, '--max-duration', '900'] + health,
                            stdout=subprocess.PIPE, universal_newlines=True)
    begun = time.monotonic()
    rolling = {'sglang_force_restart': True, 'redeploy_serial': args.serial, 'redeploy_max_unavailable': args.serial}
    if args.bake > 0:
        rolling.update(metrics, sglang_canary_bake=args.bake, redeploy_canary=1)
    rc = playbook(inventory_args, rolling, os.path.join(state, 'rolling.log'))
    wall = time.monotonic() - begun
    with open(stop_file, 'w'):
        pass
    measured = json.loads(load.communicate(timeout=300)[0].strip().splitlines()[-1])
    reports, bake = {}, None
    for host in hosts:
        with open(os.path.join(REPO, '.cache', 'lab', 'reports', host + '.json')) as handle:
            written = json.load(handle)
        reports[host] = written['status']
        bake = bake or written.get('bake')
    line = {'hosts': args.hosts, 'requests_total': measured['requests_total'],
            'requests_failed': measured['requests_failed'], 'min_healthy': measured['min_healthy'],
            'wall_s': round(wall, 2), 'playbook_rc': rc, 'serial': args.serial, 'rate': args.rate,
            'health_samples': measured.get('samples'), 'statuses': reports, 'failures': measured.get('failures', []),
            'bake': bake and dict((key, bake.get(key)) for key in ('verdict', 'reason', 'seconds', 'canary', 'baseline',
                                                                  'baseline_servers'))}
    print(json.dumps(line))
    sys.exit(0 if rc == 0 and measured['requests_failed'] == 0 else 1)


if __name__ == '__main__':
    main()
