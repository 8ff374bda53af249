#!/usr/bin/env python3
"""The canary bake's analysis, measured on the stand-in: its noise on an unchanged canary (verdicts over repeated
bakes) and the smallest slowdown it catches at the default settings.

Two stand-ins on loopback (bench/serving.py's Standin: the lab's decode MODEL, not a GPU), the baseline and the
canary, both with --enable-metrics; a steady stream of streamed /generate requests split between them in turn (as
the lab's router does, round robin); for each bake, both servers' /metrics are read before and after WINDOW
seconds and judged exactly as the role does (module_utils/domain/_live_metrics.difference, plugin_utils/_bake.verdict
with its defaults). The canary runs with LAB_STANDIN_SLOWDOWN = each factor (1.0: unchanged).

    .venv/bin/python bench/bake.py [--window 20] [--repeats 5] [--rate 8]

Writes docs/measurements/DATE-bake.json and prints a table. Not a test: figures, never asserted.
"""
import argparse
import datetime
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402  (bench/serving.py: the stand-in on loopback, and this checkout's collection on sys.path)

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _live_metrics  # noqa: E402
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _bake  # noqa: E402

FACTORS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0)
MAX_NEW_TOKENS = 16


def send(url, stop, rate, counts, index):
    """Stream one request every 2/rate s to url (two senders make `rate` a second), until stop is set."""
    parsed = urllib.parse.urlparse(url)
    body = json.dumps({'text': 'bake', 'stream': True, 'sampling_params': {'max_new_tokens': MAX_NEW_TOKENS,
                                                                            'ignore_eos': True}})
    interval = 2.0 / rate
    next_at = time.monotonic()
    workers = []

    def one():
        try:
            connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
            connection.request('POST', '/generate', body, {'Content-Type': 'application/json'})
            response = connection.getresponse()
            response.read()
            counts[index]['ok' if response.status == 200 else 'failed'] += 1
            connection.close()
        except OSError:
            counts[index]['failed'] += 1
    while not stop.is_set():
        worker = threading.Thread(target=one, daemon=True)
        worker.start()
        workers.append(worker)
        next_at += interval
        stop.wait(max(0.0, next_at - time.monotonic()))
    for worker in workers:
        worker.join(60)


def bake_once(canary, baseline, window, rate):
    stop = threading.Event()
    counts = [{'ok': 0, 'failed': 0}, {'ok': 0, 'failed': 0}]
    senders = [threading.Thread(target=send, args=(server.url, stop, rate, counts, index))
               for index, server in enumerate((canary, baseline))]
    for sender in senders:
        sender.start()
    time.sleep(2)  # a stream already running, as the router's traffic is when the bake begins
    first = [_live_metrics.scrape(server.url, 10) for server in (canary, baseline)]
    time.sleep(window)
    last = [_live_metrics.scrape(server.url, 10) for server in (canary, baseline)]
    stop.set()
    for sender in senders:
        sender.join(90)
    served = [_live_metrics.jsonable(_live_metrics.difference(a, b)) for a, b in zip(first, last)]
    judged = _bake.verdict(served[0], [served[1]])
    return {'verdict': judged['verdict'], 'reason': judged['reason'], 'canary': judged['canary'],
            'baseline': judged['baseline'], 'client_failed': counts[0]['failed'] + counts[1]['failed']}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--window', type=float, default=20.0, help='seconds of each bake')
    parser.add_argument('--repeats', type=int, default=5, help='bakes per factor')
    parser.add_argument('--rate', type=float, default=8.0, help='requests per second, both servers together')
    parser.add_argument('--factors', type=float, nargs='*', default=list(FACTORS))
    args = parser.parse_args()
    root = serving.tempfile.mkdtemp(prefix='bench-bake-')
    baseline = serving.Standin(root, sys.executable, [])
    results = []
    try:
        for factor in args.factors:
            canary = serving.Standin(root, sys.executable, [], env={'LAB_STANDIN_SLOWDOWN': str(factor)})
            try:
                bakes = [bake_once(canary, baseline, args.window, args.rate) for dummy in range(args.repeats)]
            finally:
                canary.stop()
            verdicts = dict((name, sum(1 for bake in bakes if bake['verdict'] == name))
                            for name in ('pass', 'fail', 'inconclusive'))
            results.append({'slowdown': factor, 'verdicts': verdicts, 'bakes': bakes})
            print('slowdown %.2f: %s; canary itl p95 %s s, baseline %s s' % (
                factor, ', '.join('%s %d' % item for item in sorted(verdicts.items())),
                [bake['canary']['itl_p95_s'] for bake in bakes], [bake['baseline']['itl_p95_s'] for bake in bakes]),
                flush=True)
    finally:
        baseline.stop()
        serving.shutil.rmtree(root, True)
    caught = [result['slowdown'] for result in results if result['slowdown'] > 1
              and result['verdicts']['fail'] == len(result['bakes'])]
    summary = {'date': datetime.date.today().isoformat(), 'window_s': args.window, 'repeats': args.repeats,
               'rate': args.rate, 'max_new_tokens': MAX_NEW_TOKENS, 'settings': _bake.DEFAULTS,
               'smallest_slowdown_always_caught': min(caught) if caught else None, 'results': results}
    path = os.path.join(serving.REPO, 'docs', 'measurements', '%s-bake.json' % summary['date'])
    with open(path, 'w') as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
    print('\n| canary slowdown | pass | fail | inconclusive |\n|---:|---:|---:|---:|')
    for result in results:
        print('| %.2f | %d | %d | %d |' % (result['slowdown'], result['verdicts']['pass'], result['verdicts']['fail'],
                                          result['verdicts']['inconclusive']))
    print('\nsmallest slowdown failed in every bake: %s; written to %s' % (summary['smallest_slowdown_always_caught'],
                                                                          path))
    return 0


if __name__ == '__main__':
    sys.exit(main())
