#!/usr/bin/env python3
"""A bounded, steady stream of POST /generate requests through the router, with the fleet's health watched.

    .venv/bin/python bench/load.py --url http://127.0.0.1:30080 --rate 20 --concurrency 16 \\
        --duration 60 --health http://127.0.0.1:30000/health ...      (or --stop-file PATH)

What it is for: a fleet redeploy that drains each host through the router must not fail a client's
request, and must never take more hosts out than its rolling policy allows. While it runs, this sends
--rate requests per second (never more than --concurrency in flight) and, every --health-interval
seconds (0.1 at most), asks every listed /health URL at once; a sample counts the URLs answering 200.
It stops after --duration seconds, or once --stop-file exists, and in any case after --max-duration,
waits for the requests still in flight, and prints one JSON line:

    {"requests_total": N, "requests_failed": N, "failures": [{"at_s", "reason"}...(first 10)],
     "min_healthy": N, "samples": N, "wall_s": S, ...}

Loopback only (the lab's rule): every URL must name an IPv4 address in 127.0.0.0/8, or it refuses to
start (exit 2). Standard library only, so it runs from any python3.
"""
import argparse
import ipaddress
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

LOOPBACK = ipaddress.ip_network('127.0.0.0/8')
MAX_FAILURES_KEPT = 10
# The fastest the health of the fleet may be sampled less often than: a drained host's outage in the
# lab lasts a few hundred milliseconds, so a slower sampler could miss it entirely.
SLOWEST_HEALTH_INTERVAL = 0.1


def loopback_url(url):
    """Return url if its host is an IPv4 literal in 127.0.0.0/8 over http; raise ValueError otherwise.

    A host name is refused even when it is 'localhost': what it resolves to is not this tool's to trust.
    """
    parts = urlsplit(url)
    if parts.scheme != 'http':
        raise ValueError('%s: only http:// URLs are accepted' % url)
    try:
        address = ipaddress.ip_address(parts.hostname or '')
    except ValueError:
        raise ValueError('%s: the host must be an IPv4 address in 127.0.0.0/8' % url)
    if address.version != 4 or address not in LOOPBACK:
        raise ValueError('%s: %s is not in 127.0.0.0/8 (loopback only)' % (url, address))
    return url


def generate_url(base):
    """The router's /generate URL for a base URL (a URL already ending in /generate is kept)."""
    base = base.rstrip('/')
    return base if base.endswith('/generate') else base + '/generate'


def next_due(previous_due, now, interval):
    """When the next request is due: one interval after the last, but never in the past.

    A dispatcher that fell behind (a stalled machine, a full --concurrency) resumes the steady rate
    from now instead of firing the missed requests in one burst.
    """
    due = previous_due + interval
    return due if due >= now else now


def should_stop(elapsed, duration, max_duration, stop_file_exists):
    """Why the stream ends now, or None while it goes on."""
    if elapsed >= max_duration:
        return 'max_duration'
    if duration is not None and elapsed >= duration:
        return 'duration'
    if stop_file_exists:
        return 'stop_file'
    return None


def failure_reason(status=None, body=b'', error=None):
    """One line saying why a request failed: 'HTTP 503: {...}' or the connection error."""
    if error is not None:
        reason = getattr(error, 'reason', None)
        return 'connection: %s' % (reason if reason is not None else error)
    text = body.decode('utf-8', 'replace') if isinstance(body, bytes) else str(body)
    return 'HTTP %s: %s' % (status, ' '.join(text.split())[:200])


class Tally(object):
    """Request outcomes and health samples, shared by the threads; the summary is what is printed."""

    def __init__(self, health_urls, keep=MAX_FAILURES_KEPT):
        self.lock = threading.Lock()
        self.keep = keep
        self.requests_total = 0
        self.requests_failed = 0
        self.failures = []
        self.samples = 0
        # Fewest hosts answering 200 in one sample; with no URL to watch there is nothing to report.
        self.min_healthy = None
        self.min_healthy_at_s = None
        self.health_urls = list(health_urls)

    def request_done(self, at_s, reason=None):
        with self.lock:
            self.requests_total += 1
            if reason is not None:
                self.requests_failed += 1
                if len(self.failures) < self.keep:
                    self.failures.append({'at_s': round(at_s, 3), 'reason': reason})

    def health_sample(self, at_s, healthy):
        with self.lock:
            self.samples += 1
            if self.min_healthy is None or healthy < self.min_healthy:
                self.min_healthy = healthy
                self.min_healthy_at_s = round(at_s, 3)

    def summary(self, wall_s, stopped_by):
        with self.lock:
            return {'requests_total': self.requests_total, 'requests_failed': self.requests_failed,
                    'failures': list(self.failures), 'min_healthy': self.min_healthy,
                    'min_healthy_at_s': self.min_healthy_at_s, 'hosts_watched': len(self.health_urls),
                    'samples': self.samples, 'wall_s': round(wall_s, 3), 'stopped_by': stopped_by}


def post_generate(url, max_new_tokens, timeout):
    """One request; returns None on a 200 answer with a text, else why it failed."""
    body = json.dumps({'text': 'The capital of France is',
                       'sampling_params': {'max_new_tokens': max_new_tokens, 'temperature': 0}}).encode()
    request = urllib.request.Request(url, data=body, method='POST', headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = response.read()
            if response.status != 200:
                return failure_reason(response.status, payload)
    except urllib.error.HTTPError as exc:
        return failure_reason(exc.code, exc.read())
    except (OSError, ValueError) as exc:  # refused, reset, timeout (URLError and socket errors are OSErrors)
        return failure_reason(error=exc)
    try:
        answer = json.loads(payload)
    except ValueError:
        return failure_reason(200, b'not JSON: ' + payload[:100])
    if not isinstance(answer, dict) or 'text' not in answer:
        return failure_reason(200, b'no text in the answer: ' + payload[:100])
    return None


def probe(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def watch_health(tally, urls, interval, stop, started, timeout=None):
    """Every interval, ask every URL at once and record how many answered 200 within timeout (default: five
    intervals, at least 0.5 s). A stopped server refuses at once whatever the timeout; a longer one only keeps a
    machine too busy to answer in 0.5 s from counting serving hosts as down."""
    timeout = timeout or max(interval * 5, 0.5)
    if not urls:
        return
    # One worker per URL: a host that hangs delays its own probe, not the others'.
    with ThreadPoolExecutor(max_workers=len(urls)) as pool:
        tick = time.monotonic()
        while not stop.is_set():
            healthy = sum(pool.map(lambda u: probe(u, timeout=timeout), urls))
            tally.health_sample(time.monotonic() - started, healthy)
            tick = next_due(tick, time.monotonic(), interval)
            stop.wait(max(0.0, tick - time.monotonic()))


def run(args):
    url = generate_url(args.url)
    tally = Tally(args.health)
    started = time.monotonic()
    stop_health = threading.Event()
    sampler = threading.Thread(target=watch_health, args=(tally, args.health, args.health_interval,
                                                          stop_health, started, args.health_timeout))
    sampler.start()
    # Bounds the requests in flight: the dispatcher waits for a free slot rather than pile them up.
    slots = threading.BoundedSemaphore(args.concurrency)
    threads = []

    def one_request():
        try:
            reason = post_generate(url, args.max_new_tokens, args.request_timeout)
            tally.request_done(time.monotonic() - started, reason)
        finally:
            slots.release()

    interval = 1.0 / args.rate
    due = started
    stopped_by = None
    # Give the sampler one round before the first request, so min_healthy covers the whole stream.
    while tally.samples == 0 and args.health and time.monotonic() - started < 2.0:
        time.sleep(0.01)
    while True:
        now = time.monotonic()
        stopped_by = should_stop(now - started, args.duration, args.max_duration,
                                 bool(args.stop_file) and os.path.exists(args.stop_file))
        if stopped_by:
            break
        if due > now:
            time.sleep(min(due - now, 0.05))  # short naps: a stop file is noticed within 50 ms
            continue
        if not slots.acquire(timeout=0.05):
            continue
        thread = threading.Thread(target=one_request, daemon=True)
        thread.start()
        threads.append(thread)
        threads = [t for t in threads if t.is_alive()]
        due = next_due(due, time.monotonic(), interval)
    # Requests in flight finish (each is bounded by --request-timeout) before the books close.
    for thread in threads:
        thread.join(args.request_timeout + 5)
    stop_health.set()
    sampler.join()
    return tally.summary(time.monotonic() - started, stopped_by)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--url', required=True, help='the router, e.g. http://127.0.0.1:30080 (loopback only)')
    parser.add_argument('--rate', type=float, default=10.0, help='requests started per second')
    parser.add_argument('--concurrency', type=int, default=16, help='most requests in flight at once')
    parser.add_argument('--duration', type=float, help='seconds to run (without it, until --stop-file exists)')
    parser.add_argument('--stop-file', help='stop once this file exists')
    parser.add_argument('--max-duration', type=float, default=900.0, help='hard limit in seconds, whatever else')
    parser.add_argument('--health', action='append', default=[], metavar='URL',
                        help="a gpu host's /health URL; repeat for every host")
    parser.add_argument('--health-interval', type=float, default=SLOWEST_HEALTH_INTERVAL,
                        help='seconds between health samples (at most %s)' % SLOWEST_HEALTH_INTERVAL)
    parser.add_argument('--health-timeout', type=float,
                        help='seconds a /health answer may take to count (default: 5 intervals, at least 0.5)')
    parser.add_argument('--request-timeout', type=float, default=60.0, help='seconds one request may take')
    parser.add_argument('--max-new-tokens', type=int, default=16)
    args = parser.parse_args(argv)
    problems = []
    for url in [args.url] + args.health:
        try:
            loopback_url(url)
        except ValueError as exc:
            problems.append(str(exc))
    if not args.rate > 0:
        problems.append('--rate must be above 0')
    if args.concurrency < 1:
        problems.append('--concurrency must be at least 1')
    if not 0 < args.health_interval <= SLOWEST_HEALTH_INTERVAL:
        problems.append('--health-interval must be above 0 and at most %s' % SLOWEST_HEALTH_INTERVAL)
    if args.duration is None and not args.stop_file:
        problems.append('give --duration or --stop-file (or both)')
    if not args.max_duration > 0:
        problems.append('--max-duration must be above 0')
    if args.duration is not None and not 0 < args.duration <= args.max_duration:
        problems.append('--duration must be above 0 and at most --max-duration')
    if not args.request_timeout > 0:
        problems.append('--request-timeout must be above 0')
    if args.health_timeout is not None and not args.health_timeout > 0:
        problems.append('--health-timeout must be above 0')
    if problems:
        parser.error('; '.join(problems))
    return args


def main(argv=None):
    args = parse_args(argv)
    print(json.dumps(run(args), sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
