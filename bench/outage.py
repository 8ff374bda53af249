#!/usr/bin/env python3
"""Outage of a redeploy against a plain restart, measured from outside on the embedded lab.

    .venv/bin/python bench/outage.py [--rounds 5]      (make bench-outage; the lab must be up: lab/lab up)

Each gpu host's /health is probed every 20 ms by its own thread; an outage is the longest run of
non-200 answers (or refused connections) during one variant. Variants, alternated round by round so
drift hits all of them alike:

  restart     the same server restarted by hand over ssh: `systemctl restart sglang` (gpu1) or
              SIGTERM to the detached server's session, wait, start it again (gpu2)
  manual      the manual procedure done correctly, as a bash script over ssh: stop, kill SGLang's
              leftovers in the container through pct (gpu1), wait until nvidia-smi reads 0 MiB, start,
              wait for /health
  redeploy    ansible-playbook playbooks/redeploy.yml -e sglang_force_restart=true, both hosts
  redeploy1   the same, one host at a time (--limit), to see whether hosts wait for each other

Then the no-op: a redeploy with nothing to change, its wall time, and proof of zero downtime (no
failed probe, same server PID). Prints medians and ratios, writes bench/results/outage-*.json and,
where matplotlib is installed (requirements/bench.txt), PNG charts beside it.
Loopback only: every address probed is a lab host's 127.0.0.N.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The lab instance in LAB_INSTANCE (0 unless set), as `lab/lab describe` says: its addresses, inventory and reports.
LAB = json.loads(subprocess.check_output([os.path.join(REPO, 'lab', 'lab'), 'describe'], universal_newlines=True))
HOSTS = {name: LAB['hosts'][name]['address'] for name in ('gpu1', 'gpu2')}
PVE = LAB['hosts']['pve1']['address']
KEY = os.path.join(LAB['state_dir'], 'id_ed25519')
REPORTS = LAB['reports_dir']
SSH = ['ssh', '-i', KEY, '-p', '2222', '-o', 'BatchMode=yes', '-o', 'StrictHostKeyChecking=no',
       '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR']
ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
           ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, '.cache', 'collections'),
           PATH=os.path.join(REPO, '.venv', 'bin') + os.pathsep + os.environ.get('PATH', ''))
PROBE_INTERVAL = 0.02

# The plain restart of the detached server, as an operator would type it (no Ansible).
DETACHED_RESTART = r'''
pid=$(cat /run/sglang/sglang.pid); kill -TERM -- -$pid
while kill -0 -- -$pid 2>/dev/null; do sleep 0.02; done
setsid /usr/bin/python3 /etc/sglang/launcher.py run /etc/sglang/launch.json >>/var/log/sglang/server.log 2>&1 </dev/null &
echo $! >/run/sglang/sglang.pid
'''
WAIT_HEALTHY = r'''
until [ "$(python3 -c 'import urllib.request,sys
try: print(urllib.request.urlopen(sys.argv[1], timeout=1).status)
except Exception: print(0)' http://%s:30000/health)" = 200 ]; do sleep 0.05; done
'''
WAIT_GPU_FREE = r'''
for i in $(seq 1 600); do
  nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits \
    | awk -F', ' '$3 > 0 {busy=1} END {exit busy}' && break; sleep 0.05; done
'''
# One remote command line: ssh hands it to the node's shell, so the pattern is quoted for it.
KILL_LEFTOVERS = "pct exec 101 -- pkill -TERM -f 'sglang::|sglang_standin'"


class Probe(object):
    """GET /health every 20 ms in a thread; records (time, ok) samples."""

    def __init__(self, address):
        self.url = 'http://%s:30000/health' % address
        self.samples = []
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while self.running:
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=0.5) as response:
                    ok = response.status == 200
            except OSError:
                ok = False
            self.samples.append((started, ok))
            time.sleep(max(0.0, PROBE_INTERVAL - (time.monotonic() - started)))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    def _outages(self):
        """([(first failed, next good) probe times of each outage, monotonic clock], still down at the end)."""
        runs, down_since = [], None
        for at, ok in self.samples:
            if not ok and down_since is None:
                down_since = at
            elif ok and down_since is not None:
                runs.append((down_since, at))
                down_since = None
        return runs, down_since is not None

    def longest_outage_span(self):
        """(first failed, next good) probe times of the longest outage, on the wall clock (time.time())."""
        offset = time.time() - time.monotonic()
        runs, _ = self._outages()
        if not runs:
            return None
        first, back = max(runs, key=lambda run: run[1] - run[0])
        return first + offset, back + offset

    def outage(self):
        """Seconds from the first failed probe to the next good one (longest such run); 0 when none failed."""
        runs, still_down = self._outages()
        if still_down:
            return float('inf')
        return max([back - first for first, back in runs] or [0.0])

    def failures(self):
        return sum(1 for _, ok in self.samples if not ok)


def ssh(address, script):
    subprocess.run(SSH + ['root@' + address, script], check=True, stdout=subprocess.DEVNULL)


def measured(action, hosts):
    probes = dict((name, Probe(HOSTS[name])) for name in hosts)
    for probe in probes.values():
        probe.__enter__()
    time.sleep(0.2)
    started = time.monotonic()
    action()
    wall = time.monotonic() - started
    # The server is judged from outside: keep probing until every host answers again.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(not p.samples or not p.samples[-1][1] for p in probes.values()):
        time.sleep(0.05)
    time.sleep(0.2)
    for probe in probes.values():
        probe.__exit__()
    return dict((name, probe.outage()) for name, probe in probes.items()), wall, probes


def plain_restart(name):
    if name == 'gpu1':
        return lambda: ssh(HOSTS[name], 'systemctl restart sglang')
    return lambda: ssh(HOSTS[name], DETACHED_RESTART)


def manual(name):
    def run():
        if name == 'gpu1':
            ssh(HOSTS[name], 'systemctl stop sglang')
            subprocess.run(SSH + ['root@' + PVE, KILL_LEFTOVERS], stdout=subprocess.DEVNULL)
            ssh(HOSTS[name], WAIT_GPU_FREE + 'systemctl start sglang\n' + WAIT_HEALTHY % HOSTS[name])
        else:
            script = DETACHED_RESTART.replace('setsid', WAIT_GPU_FREE + 'setsid')
            ssh(HOSTS[name], script + WAIT_HEALTHY % HOSTS[name])
    return run


def playbook(extravars, limit=None, timeline=None):
    """A redeploy as an operator runs it; with `timeline`, bench/callback_plugins/timeline.py writes there
    each task's start and end per host (controller clock)."""
    env = dict(ENV)
    if timeline:
        env.update(GPUOPS_TIMELINE=timeline, ANSIBLE_CALLBACKS_ENABLED='timeline',
                   ANSIBLE_CALLBACK_PLUGINS=os.path.join(REPO, 'bench', 'callback_plugins'))
    argv = ['ansible-playbook', '-i', LAB['inventory'],
            os.path.join(REPO, 'playbooks', 'redeploy.yml'), '-e', json.dumps(extravars)]
    if limit:
        argv += ['--limit', limit]

    def run():
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        if done.returncode != 0:
            sys.exit('the redeploy failed:\n' + done.stdout[-3000:])
    return run


def server_pids():
    pids = {}
    for name, address in HOSTS.items():
        with urllib.request.urlopen('http://%s:30000/server_info' % address, timeout=5) as response:
            pids[name] = json.load(response)['internal_states'][0]['pid']
    return pids


def charts(results, path_prefix):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed (pip install -r requirements/bench.txt): no charts')
        return []
    variants = ['restart', 'manual', 'redeploy', 'redeploy1']
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.35
    for offset, name in enumerate(sorted(HOSTS)):
        values = [statistics.median(results['outage'][variant][name]) for variant in variants]
        ax.bar([i + offset * width for i in range(len(variants))], values, width, label=name)
    ax.set_xticks([i + width / 2 for i in range(len(variants))])
    ax.set_xticklabels(variants)
    ax.set_ylabel('outage, median s (20 ms /health probe)')
    ax.set_title('Outage per variant, lab, %d rounds' % results['rounds'])
    ax.legend()
    fig.tight_layout()
    paths = [path_prefix + '-outage.png']
    fig.savefig(paths[0], dpi=110)
    phases = results.get('phases')
    if phases:
        fig, ax = plt.subplots(figsize=(8, 2.8))
        colors = {'stop': '#d62728', 'kill': '#ff7f0e', 'gpu_release': '#9467bd',
                  'start': '#2ca02c', 'other': '#7f7f7f'}
        for row, (host, report) in enumerate(sorted(phases.items())):
            left = 0.0
            for phase in ('stop', 'kill', 'gpu_release', 'start'):
                width = report['phases_s'].get(phase) or 0.0
                ax.barh(row, width, left=left, color=colors[phase], label=phase if row == 0 else None)
                left += width
            other = max(0.0, (report.get('downtime_s') or 0.0) - left)
            ax.barh(row, other, left=left, color=colors['other'], label='other (ssh round trips)' if row == 0 else None)
        ax.set_yticks(range(len(phases)))
        ax.set_yticklabels(sorted(phases))
        ax.set_xlabel('seconds from the stop to the first healthy answer (host clock)')
        ax.set_title('Where the outage of one forced redeploy goes')
        ax.legend(fontsize=7, loc='lower right')
        fig.tight_layout()
        paths.append(path_prefix + '-phases.png')
        fig.savefig(paths[-1], dpi=110)
    if results.get('timeline'):
        paths.append(timeline_chart(plt, results['timeline'], path_prefix + '-timeline.png'))
    return paths


# The outage window's steps, as the role names its tasks; everything else is drawn grey.
WINDOW_STEPS = [('Stop the server', '#d62728'), ('Stop what is left', '#ff7f0e'), ('Release the GPUs', '#9467bd'),
                ('Apply the patch', '#8c564b'), ('Move the candidate', '#e377c2'),
                ('Restart the SGLang server', '#2ca02c')]


def timeline_chart(plt, timeline, path):
    """One row per host: each task of one two-host redeploy as a bar (controller clock), the outage seen
    from outside as a black line above it."""
    fig, ax = plt.subplots(figsize=(10, 3.8))
    hosts = sorted(timeline['outages'])
    t0 = min(row['start'] for row in timeline['tasks'] if row['start'])
    seen = set()
    for index, host in enumerate(hosts):
        for row in timeline['tasks']:
            if row['host'] != host or not row['start']:
                continue
            label, color = next(((name, color) for name, color in WINDOW_STEPS if name in row['task']),
                                ('other task (controller and round trip)', '#c7c7c7'))
            ax.barh(index, row['end'] - row['start'], left=row['start'] - t0, height=0.5, color=color,
                    edgecolor='white', linewidth=0.3, label=None if label in seen else label)
            seen.add(label)
        span = timeline['outages'][host]
        if span:
            ax.plot([span[0] - t0, span[1] - t0], [index + 0.38] * 2, color='black', linewidth=3,
                    label=None if 'outage' in seen else 'outage seen from outside (/health every 20 ms)')
            seen.add('outage')
    ax.set_yticks(range(len(hosts)))
    ax.set_yticklabels(hosts)
    ax.set_xlabel('seconds since the first task (ansible-playbook ... -e sglang_force_restart=true, both hosts)')
    ax.set_title('One forced redeploy, task by task, per host')
    ax.legend(fontsize=7, loc='upper center', bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    outage = dict((variant, dict((name, []) for name in HOSTS)) for variant in
                  ('restart', 'manual', 'redeploy', 'redeploy1'))
    walls = {'redeploy': []}
    timeline = None
    # Start from a converged lab: a fresh `lab/lab up` leaves strays holding GPU memory, which only a
    # redeploy clears (and the manual script's wait for 0 MiB would never end).
    playbook({})()
    sys.stdout.reconfigure(line_buffering=True)
    for round_ in range(args.rounds):
        for name in sorted(HOSTS):
            outage['restart'][name].append(measured(plain_restart(name), [name])[0][name])
            outage['manual'][name].append(measured(manual(name), [name])[0][name])
            outage['redeploy1'][name].append(measured(playbook({'sglang_force_restart': True}, limit=name),
                                                      [name])[0][name])
        # The last round's two-host redeploy also records its task timeline (for the chart).
        last = round_ == args.rounds - 1
        timeline_file = os.path.join(REPO, 'bench', 'results', 'timeline.jsonl') if last else None
        if timeline_file:
            os.makedirs(os.path.dirname(timeline_file), exist_ok=True)
            if os.path.exists(timeline_file):
                os.unlink(timeline_file)
        both, wall, probes = measured(playbook({'sglang_force_restart': True}, timeline=timeline_file),
                                      sorted(HOSTS))
        if timeline_file:
            with open(timeline_file) as handle:
                timeline = {'tasks': [json.loads(line) for line in handle],
                            'outages': dict((name, probe.longest_outage_span()) for name, probe in probes.items())}
        walls['redeploy'].append(wall)
        for name in HOSTS:
            outage['redeploy'][name].append(both[name])
        print('round %d: %s' % (round_ + 1, json.dumps(dict(
            (variant, dict((name, round(values[-1], 2)) for name, values in hosts.items()))
            for variant, hosts in outage.items()))))
    phases = {}
    for name in HOSTS:
        with open(os.path.join(REPORTS, name + '.json')) as handle:
            phases[name] = json.load(handle)
    pids = server_pids()
    noop_outage, noop_wall, noop_probes = measured(playbook({}), sorted(HOSTS))
    noop = {'wall_s': round(noop_wall, 2), 'failed_probes': dict((n, p.failures()) for n, p in noop_probes.items()),
            'same_pids': server_pids() == pids}
    medians = dict((variant, dict((name, round(statistics.median(values), 3)) for name, values in hosts.items()))
                   for variant, hosts in outage.items())
    ratios = dict((name, {'redeploy/restart': round(medians['redeploy'][name] / medians['restart'][name], 2),
                          'manual/restart': round(medians['manual'][name] / medians['restart'][name], 2),
                          'redeploy(2 hosts)/redeploy(1 host)':
                              round(medians['redeploy'][name] / medians['redeploy1'][name], 2)})
                  for name in HOSTS)
    results = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
               'rounds': args.rounds, 'outage': outage, 'median_outage_s': medians, 'ratios': ratios,
               'redeploy_wall_s': walls['redeploy'], 'noop': noop, 'phases': phases, 'timeline': timeline,
               'machine': '%d cores, %s' % (os.cpu_count(), os.uname().release)}
    folder = os.path.join(REPO, 'bench', 'results')
    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, 'outage-%s' % time.strftime('%Y%m%dT%H%M%S'))
    with open(prefix + '.json', 'w') as handle:
        json.dump(results, handle, indent=1, default=str)
    pictures = charts(results, prefix)
    print('median outage (s):', json.dumps(medians))
    print('ratios:', json.dumps(ratios))
    print('no-op:', json.dumps(noop))
    print('written:', prefix + '.json', *pictures)


if __name__ == '__main__':
    main()
