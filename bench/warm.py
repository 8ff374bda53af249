#!/usr/bin/env python3
"""The model load inside a redeploy's outage, measured from outside on the embedded lab (issue 45).

    LAB_WEIGHTS_MIB=2048 lab/lab up && .venv/bin/python bench/warm.py [--rounds 5]      (make bench-warm)

Every lab server loads its weight files (LAB_WEIGHTS_MIB of them, read byte by byte before the stand-in binds its
port, as SGLang does) at each start. Variants, alternated round by round so that drift hits all of them alike, on
each gpu host in turn:

  prefetch   the host's model files dropped from the page cache (lab/lab drop-cache), then a forced redeploy
             (ansible-playbook playbooks/redeploy.yml --limit HOST -e sglang_force_restart=true): the prefetch
             reads them back while the old server serves
  cold       dropped the same way, then the same redeploy with -e sglang_prefetch=false: the new server reads
             them from disk inside the outage
  restart    a plain restart of a server whose files are in the page cache (systemctl restart on gpu1, the
             detached server's session ended and started again on gpu2), no Ansible

The outage is the longest run of failed /health probes (every 20 ms; bench/outage.py's probe). Each redeploy's
report gives its phases (stop, kill, gpu_release, start) and the prefetch's figures. Prints medians and ratios
and writes bench/results/warm-*.json. Loopback only: the lab's hosts are 127.0.0.N.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from outage import HOSTS, REPO, REPORTS, measured, plain_restart, playbook  # noqa: E402  (bench/outage.py, beside it)

VARIANTS = ('prefetch', 'cold', 'restart')


def drop_cache(name: str) -> None:
    subprocess.run([os.path.join(REPO, 'lab', 'lab'), 'drop-cache', name], check=True, stdout=subprocess.DEVNULL)


def report(name: str) -> dict:
    with open(os.path.join(REPORTS, name + '.json')) as handle:
        written = json.load(handle)
    return {'downtime_s': written.get('downtime_s'), 'phases_s': written.get('phases_s'),
            'prefetch': written.get('prefetch')}


def one(variant: str, name: str) -> tuple[float, dict | None]:
    """The outage of one variant on one host, and its redeploy's report (None for the plain restart)."""
    if variant == 'restart':
        return measured(plain_restart(name), [name])[0][name], None
    drop_cache(name)
    extravars = {'sglang_force_restart': True, 'sglang_prefetch': variant == 'prefetch'}
    outage = measured(playbook(extravars, limit=name), [name])[0][name]
    return outage, report(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    weights_mib = int(os.environ.get('LAB_WEIGHTS_MIB', '0') or 0)
    if weights_mib < 2048:
        sys.exit('bench/warm.py measures a load that matters: bring the lab up with LAB_WEIGHTS_MIB=2048 (or more)'
                 ' and run it with the same LAB_WEIGHTS_MIB (make bench-warm does both); got %r'
                 % os.environ.get('LAB_WEIGHTS_MIB'))
    sys.stdout.reconfigure(line_buffering=True)
    # From a converged lab, as bench/outage.py starts.
    playbook({})()
    outage = {variant: {name: [] for name in HOSTS} for variant in VARIANTS}
    reports = {variant: {name: [] for name in HOSTS} for variant in ('prefetch', 'cold')}
    for round_ in range(args.rounds):
        for name in sorted(HOSTS):
            for variant in VARIANTS:
                seconds, written = one(variant, name)
                outage[variant][name].append(seconds)
                if written is not None:
                    reports[variant][name].append(written)
        print('round %d: %s' % (round_ + 1, json.dumps(
            {variant: {name: round(values[-1], 2) for name, values in hosts.items()} for variant, hosts in outage.items()})))
    medians = {variant: {name: round(statistics.median(values), 3) for name, values in hosts.items()}
               for variant, hosts in outage.items()}
    ratios = {name: {'prefetch/restart': round(medians['prefetch'][name] / medians['restart'][name], 2),
                     'cold/restart': round(medians['cold'][name] / medians['restart'][name], 2),
                     'cold/prefetch': round(medians['cold'][name] / medians['prefetch'][name], 2)}
              for name in HOSTS}
    start_phase = {variant: {name: round(statistics.median(report['phases_s']['start'] for report in written), 3)
                             for name, written in hosts.items()} for variant, hosts in reports.items()}
    prefetch_s = {name: round(statistics.median(report['prefetch']['seconds'] for report in written), 3)
                  for name, written in reports['prefetch'].items()}
    results = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
               'rounds': args.rounds, 'weights_mib': weights_mib, 'outage': outage, 'median_outage_s': medians,
               'ratios': ratios, 'median_start_phase_s': start_phase, 'median_prefetch_s': prefetch_s,
               'reports': reports, 'machine': '%d cores, %s' % (os.cpu_count(), os.uname().release)}
    folder = os.path.join(REPO, 'bench', 'results')
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, 'warm-%s.json' % time.strftime('%Y%m%dT%H%M%S'))
    with open(path, 'w') as handle:
        json.dump(results, handle, indent=1, default=str)
    print('median outage (s):', json.dumps(medians))
    print('ratios:', json.dumps(ratios))
    print('median start phase, host-measured (s):', json.dumps(start_phase))
    print('median prefetch (s, before the window):', json.dumps(prefetch_s))
    print('written:', path)


if __name__ == '__main__':
    main()
