#!/usr/bin/env python3
"""Throughput and latency of the lab's stand-in against concurrency, and the noise of the measurement.

    .venv/bin/python bench/serving.py [--noise-runs 5]      (make bench-serving)

The stand-in (lab/standin) started directly on loopback, not in the lab's containers: the containers add
nothing to what is measured here (the stand-in's decode MODEL, lab/standin/sglang_standin/decode.py, is
what decides the figures), and a plain process needs no lab lock. Each variant runs in a virtualenv holding
the sglang release it needs, installed --no-deps from .cache/wheels as the lab installs it, so the stand-in
reads adaptive mode with the release's own parser and env mode checks the patch as the lab does:

  plain          no speculation
  eagle3         EAGLE-3, 3 draft steps (SGLang's default cap of 48 running requests with speculation)
  eagle3-adaptive  EAGLE-3 with sglang 0.5.23 --speculative-adaptive and the tiers the role writes for a
                 threshold of 8 ({"1": [1, 3], "8": [0]}): drafting stops from a batch of 8
  eagle3-env-demo  EAGLE-3 on 0.5.12.post1 patched with files/eagle_dynamic_spec_threshold.diff and
                 SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE=8: the demo patch only counts, drafting never stops

Every level is measured with plugins/module_utils/domain/_serving_benchmark.py (what the role's gate uses):
streamed /generate, 64 output tokens a request (ignore_eos, greedy), max(16, 2 x concurrency) requests a
level, at concurrency 1, 2, 4, 8, 16, 32, 64. Then the noise: the eagle3-adaptive server, unchanged,
measured --noise-runs times at levels 1 and 16 (--noise-requests each, 16): the spread of output tok/s and p95
ITL per level, which the gate's tolerances must exceed. Writes docs/measurements/DATE-serving.json and,
with matplotlib (requirements/bench.txt), docs/benchmarks-serving.png; prints the Markdown table.
Loopback only.
"""
import argparse
import atexit
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_this_checkout():
    """run_benchmark from this checkout's collection (never an installed copy): a link named as Ansible does."""
    root = tempfile.mkdtemp(prefix='bench-serving-collection-')
    atexit.register(shutil.rmtree, root, True)  # the link only, never what it points at
    os.makedirs(os.path.join(root, 'ansible_collections', 'gpuops'))
    os.symlink(REPO, os.path.join(root, 'ansible_collections', 'gpuops', 'sglang'))
    sys.path.insert(0, root)
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._serving_benchmark import run_benchmark
    return run_benchmark


run_benchmark = import_this_checkout()

WHEELS = os.path.join(REPO, '.cache', 'wheels')
PATCH = os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff')
LEVELS = [1, 2, 4, 8, 16, 32, 64]
NOISE_LEVELS = [1, 16]
MAX_NEW_TOKENS = 64
PROMPT = 'Summarise the history of the printing press in one paragraph.'
THRESHOLD = 8
EAGLE3 = ['--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path', '/models/draft',
          '--speculative-num-steps', '3', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '4']
ORDER = ['plain', 'eagle3', 'eagle3-adaptive', 'eagle3-env-demo']
TIERS = {'1': {'candidate_steps': [1, 3]}, str(THRESHOLD): {'candidate_steps': [0]}}


def requirement(filename):
    with open(os.path.join(REPO, filename)) as handle:
        return [line.strip() for line in handle if line.startswith('sglang==')][0]


def release_venv(root, name, requirement_line, patch=None):
    """A venv with one sglang release (--no-deps, from the wheel cache), patched where asked: its python."""
    venv = os.path.join(root, name)
    subprocess.check_call([sys.executable, '-m', 'venv', '--without-pip', venv])
    python = os.path.join(venv, 'bin', 'python')
    site = subprocess.check_output([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                   universal_newlines=True).strip()
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', '--disable-pip-version-check', '--no-deps',
                           '--no-index', '--find-links', WHEELS, '--target', site, requirement_line])
    if patch:
        subprocess.check_call(['patch', '-s', '-p1', '-d', site, '-i', patch])
    return python


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class Standin(object):
    """One stand-in process on a free loopback port, with sleepers for its GPU-holding children."""

    def __init__(self, root, python, args, env=None):
        sleeper = os.path.join(root, 'sleeper.py')
        with open(sleeper, 'w') as handle:
            handle.write('import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n'
                         'time.sleep(3600)\n')
        wrapper = os.path.join(root, 'standin_bench.py')
        with open(wrapper, 'w') as handle:
            handle.write('import sys\nfrom sglang_standin import launch_server as standin\nstandin.HOLDER = %r\n'
                         'standin.DRAIN_GATE = standin.GENERATE_GATE = %r\nsys.exit(standin.main())\n'
                         % (sleeper, os.path.join(root, 'no-gate')))
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        environ = dict(os.environ, PYTHONPATH='%s:%s' % (root, os.path.join(REPO, 'lab', 'standin')),
                       LAB_STANDIN_WARMUP='0', LAB_STANDIN_DRAIN='0', **(env or {}))
        self.proc = subprocess.Popen([python, '-m', 'standin_bench', '--model-path', '/models/target', '--host',
                                      '127.0.0.1', '--port', str(self.port), '--enable-metrics'] + args,
                                     env=environ, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while not self.healthy():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError('the stand-in %s did not become healthy' % ' '.join(args))
            time.sleep(0.1)

    def healthy(self):
        try:
            with urllib.request.urlopen(self.url + '/health', timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def model(self):
        with urllib.request.urlopen(self.url + '/server_info', timeout=5) as response:
            return json.load(response)['internal_states'][0]['standin_decode']

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def measure(url, levels, requests_of):
    """One run_benchmark call per level (each its own request count); the levels' figures in order."""
    results = []
    for concurrency in levels:
        result = run_benchmark(url, [concurrency], requests_of(concurrency), MAX_NEW_TOKENS, PROMPT, 300)
        level = result['levels'][0]
        level['metrics'] = result['metrics']
        results.append(level)
        print('  c=%-3d %8.1f tok/s  ttft p95 %.3f s  itl p50 %.4f p95 %.4f s  errors %d%s' % (
            concurrency, level['output_tok_s'], level['ttft_p95_s'] or 0, level['itl_p50_s'] or 0,
            level['itl_p95_s'] or 0, level['errors'], '  TIMED OUT' if level['timed_out'] else ''), flush=True)
    return results


def spread(values):
    """min, median, max, and the largest relative distance from the median (the gate's tolerance must exceed it)."""
    middle = statistics.median(values)
    return {'min': min(values), 'median': middle, 'max': max(values),
            'max_rel_from_median': round(max(abs(v - middle) for v in values) / middle, 4) if middle else None}


def noise(url, runs, requests):
    """The same unchanged server measured runs times at NOISE_LEVELS, requests a level."""
    samples = dict((level, {'output_tok_s': [], 'itl_p95_s': [], 'ttft_p95_s': []}) for level in NOISE_LEVELS)
    for run in range(runs):
        print('noise run %d/%d' % (run + 1, runs), flush=True)
        for level in measure(url, NOISE_LEVELS, lambda concurrency: requests):
            for key in samples[level['concurrency']]:
                samples[level['concurrency']][key].append(level[key])
    return dict((str(level), dict((key, dict(spread(values), samples=values)) for key, values in figures.items()))
                for level, figures in samples.items())


def table(results):
    """Markdown: output tok/s and p95 ITL (ms) per variant and concurrency."""
    names = [name for name in ORDER if name in results['variants']]
    lines = ['| concurrency | ' + ' | '.join('%s tok/s | %s p95 ITL ms' % (n, n) for n in names) + ' |',
             '|---|' + '---|---|' * len(names)]
    for index, concurrency in enumerate(LEVELS):
        cells = []
        for name in names:
            level = results['variants'][name]['levels'][index]
            cells += ['%.0f' % level['output_tok_s'], '%.1f' % (1000 * (level['itl_p95_s'] or 0))]
        lines.append('| %d | %s |' % (concurrency, ' | '.join(cells)))
    return '\n'.join(lines)


def chart(results, path):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib is not installed (pip install -r requirements/bench.txt): no chart')
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    # eagle3 and eagle3-env-demo coincide (the demo patch only counts): dashed and hollow, so both show.
    styles = {'eagle3-env-demo': dict(linestyle='--', marker='s', markerfacecolor='none', markersize=9)}
    for name in [name for name in ORDER if name in results['variants']]:
        levels = results['variants'][name]['levels']
        style = styles.get(name, dict(marker='o'))
        top.plot(LEVELS, [level['output_tok_s'] for level in levels], label=name, **style)
        bottom.plot(LEVELS, [1000 * (level['itl_p95_s'] or 0) for level in levels], label=name, **style)
    top.set_ylabel('output tok/s (total)')
    top.set_title('Stand-in decode model (a model, not a measurement of a GPU), %d tokens a request' % MAX_NEW_TOKENS)
    top.legend(fontsize=8)
    bottom.set_ylabel('p95 inter-token latency, ms')
    bottom.set_xlabel('concurrency')
    bottom.set_xscale('log', base=2)
    bottom.set_xticks(LEVELS)
    bottom.set_xticklabels([str(level) for level in LEVELS])
    for axis in (top, bottom):
        axis.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def variants(root):
    native = release_venv(root, 'native', requirement('requirements/lab-native.txt'))
    patched = release_venv(root, 'patched', requirement('requirements/lab.txt'), PATCH)
    tiers = os.path.join(root, 'adaptive.json')
    with open(tiers, 'w') as handle:
        json.dump(TIERS, handle)
    return [('plain', native, [], {}),
            ('eagle3', native, EAGLE3, {}),
            ('eagle3-adaptive', native, EAGLE3 + ['--speculative-adaptive', '--speculative-adaptive-config', tiers], {}),
            ('eagle3-env-demo', patched, EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': str(THRESHOLD)})]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--noise-runs', type=int, default=5)
    parser.add_argument('--noise-requests', type=int, default=16, help='requests a level in the noise runs')
    parser.add_argument('--noise-only', action='store_true', help='only the noise (eagle3-adaptive), no table')
    parser.add_argument('--out', default=os.path.join(REPO, 'docs', 'measurements'))
    parser.add_argument('--chart', default=os.path.join(REPO, 'docs', 'benchmarks-serving.png'))
    parser.add_argument('--chart-from', metavar='JSON', help='only draw the chart (and print the table) of a past run')
    options = parser.parse_args()
    if options.chart_from:
        with open(options.chart_from) as handle:
            results = json.load(handle)
        print(table(results))
        print('wrote', chart(results, options.chart) or '')
        return 0
    root = tempfile.mkdtemp(prefix='bench-serving-')
    started = time.monotonic()
    results = {'date': datetime.datetime.utcnow().strftime('%Y-%m-%dT%H:%M:%SZ'), 'levels': LEVELS,
               'max_new_tokens': MAX_NEW_TOKENS, 'requests_per_level': 'max(16, 2 x concurrency)',
               'where': 'stand-in processes on loopback (%d CPUs, load %s at the start)' % (
                   os.cpu_count(), ' '.join('%.2f' % x for x in os.getloadavg())), 'variants': {}}
    try:
        for name, python, args, env in variants(root):
            if options.noise_only and name != 'eagle3-adaptive':
                continue
            print(name, flush=True)
            standin = Standin(root, python, args, env)
            try:
                if not options.noise_only:
                    results['variants'][name] = {'args': args, 'env': env, 'model': standin.model(),
                                                 'levels': measure(standin.url, LEVELS, lambda c: max(16, 2 * c))}
                if name == 'eagle3-adaptive' and options.noise_runs:
                    results['noise'] = {'variant': name, 'runs': options.noise_runs,
                                        'requests_per_level': options.noise_requests,
                                        'levels': noise(standin.url, options.noise_runs, options.noise_requests)}
            finally:
                standin.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results['elapsed_s'] = round(time.monotonic() - started, 1)
    os.makedirs(options.out, exist_ok=True)
    path = os.path.join(options.out, '%s-serving%s.json' % (
        results['date'][:10], '-noise-%d' % options.noise_requests if options.noise_only else ''))
    with open(path, 'w') as handle:
        json.dump(results, handle, indent=1, sort_keys=True)
    if options.noise_only:
        print(json.dumps(results['noise'], indent=1))
        print('wrote', path)
        return 0
    print(table(results))
    print(json.dumps(results.get('noise', {}).get('levels'), indent=1))
    print('wrote', path, chart(results, options.chart) or '')
    return 0


if __name__ == '__main__':
    sys.exit(main())
