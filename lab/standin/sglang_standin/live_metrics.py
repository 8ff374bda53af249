"""STAND-IN part: the live figures SGLang 0.5.23 exports on /metrics with --enable-metrics, for what the
stand-in serves (its tokenizer manager's histograms and counters, read from
sglang/srt/observability/metrics_collector.py: names, label names and default buckets as upstream's).

- histograms sglang:time_to_first_token_seconds and sglang:e2e_request_latency_seconds, one sample a request
  (labels model_name, is_streaming), and sglang:inter_token_latency_seconds, one sample per decode step after a
  request's first (the step's gap; label model_name);
- counters sglang:num_requests_total and sglang:generation_tokens_total (labels model_name, is_streaming),
  sglang:num_aborted_requests_total (model_name): a request the stand-in answers with an error
  (LAB_STANDIN_ERROR_RATE) counts there, as an aborted one does upstream.

Counters and histograms only grow from the server's start: a reader takes the difference of two scrapes.
"""
import bisect
import threading

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)


class Histogram(object):
    """Prometheus' histogram: a count per upper bound (cumulative when exported), a sum and a count."""

    def __init__(self, bounds):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value):
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self, name, labels):
        out, running = [], 0
        for bound, count in zip(list(self.bounds) + ['+Inf'], self.counts):
            running += count
            le = bound if bound == '+Inf' else repr(float(bound))
            out.append('%s_bucket{%s,le="%s"} %s' % (name, labels, le, float(running)))
        out.append('%s_sum{%s} %r' % (name, labels, self.sum))
        out.append('%s_count{%s} %s' % (name, labels, float(running)))
        return out


class LiveMetrics(object):
    """The server's request figures since its start, thread-safe (one HTTP thread a request)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_streaming = {}
        self.itl = Histogram(ITL_BUCKETS)
        self.aborted = 0

    def _series(self, streaming):
        key = 'true' if streaming else 'false'
        if key not in self.by_streaming:
            self.by_streaming[key] = {'ttft': Histogram(TTFT_BUCKETS), 'e2e': Histogram(E2E_BUCKETS),
                                      'requests': 0, 'tokens': 0}
        return self.by_streaming[key]

    def finished(self, streaming, ttft, gaps, e2e, tokens):
        """One request answered: its time to first token, each later step's gap, its latency, its tokens."""
        with self.lock:
            series = self._series(streaming)
            if ttft is not None:
                series['ttft'].observe(ttft)
            for gap in gaps:
                self.itl.observe(gap)
            series['e2e'].observe(e2e)
            series['requests'] += 1
            series['tokens'] += tokens

    def failed(self):
        with self.lock:
            self.aborted += 1

    def lines(self, model_name):
        label = 'model_name="%s"' % model_name.replace('\\', '\\\\').replace('"', '\\"')
        out = []
        with self.lock:
            out += ['# HELP sglang:num_requests_total Number of requests processed.',
                    '# TYPE sglang:num_requests_total counter']
            out += ['sglang:num_requests_total{%s,is_streaming="%s"} %s' % (label, key, float(series['requests']))
                    for key, series in sorted(self.by_streaming.items())]
            out += ['# HELP sglang:generation_tokens_total Number of generation tokens processed.',
                    '# TYPE sglang:generation_tokens_total counter']
            out += ['sglang:generation_tokens_total{%s,is_streaming="%s"} %s' % (label, key, float(series['tokens']))
                    for key, series in sorted(self.by_streaming.items())]
            out += ['# HELP sglang:num_aborted_requests_total Number of requests aborted.',
                    '# TYPE sglang:num_aborted_requests_total counter',
                    'sglang:num_aborted_requests_total{%s} %s' % (label, float(self.aborted))]
            for key, name, text in (('ttft', 'sglang:time_to_first_token_seconds',
                                     'Histogram of time to first token in seconds.'),
                                    ('e2e', 'sglang:e2e_request_latency_seconds',
                                     'Histogram of End-to-end request latency in seconds')):
                out += ['# HELP %s %s' % (name, text), '# TYPE %s histogram' % name]
                for streaming, series in sorted(self.by_streaming.items()):
                    out += series[key].lines(name, '%s,is_streaming="%s"' % (label, streaming))
            out += ['# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.',
                    '# TYPE sglang:inter_token_latency_seconds histogram']
            out += self.itl.lines('sglang:inter_token_latency_seconds', label)
        return out


class ErrorRate(object):
    """LAB_STANDIN_ERROR_RATE: which requests the stand-in answers with an error, deterministically (the n-th
    request fails when floor(n * rate) grows), so that a test sees the same share every run."""

    def __init__(self, rate):
        self.rate = min(1.0, max(0.0, float(rate or 0)))
        self.lock = threading.Lock()
        self.seen = 0

    def next_fails(self):
        if not self.rate:
            return False
        with self.lock:
            self.seen += 1
            return int(self.seen * self.rate) > int((self.seen - 1) * self.rate)
