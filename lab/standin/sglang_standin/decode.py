"""STAND-IN part: a batched decode scheduler, a MODEL of SGLang's, not a measurement of anything.

One scheduler thread advances every running request one step at a time, as SGLang's scheduler runs
one forward pass over its running batch. The stand-in knows no tokens: one "token" is one unit of
decode output, and text is ``" tok"`` per unit.

Step time (seconds) for a batch of b requests drafting s steps (s = 0: plain decoding):

    STEP_BASE + b * TOKEN_COST * (s + 1) + s * (DRAFT_BASE + b * DRAFT_COST)

(a fixed cost per forward pass, the verify pass over s + 1 tokens per request, then s draft passes),
plus PREFILL_COST for each request admitted in that step; every step time is multiplied by
LAB_STANDIN_SLOWDOWN (default 1). Tokens a request gains per step: 1 without drafting, the
acceptance length 1 + a + a^2 + ... + a^s with drafting (acceptance rate a), credited exactly (a request
carries the fraction over to its next step), so runs are deterministic in tokens.

The constants (ACCEPT_RATE and DRAFT_COST: the defaults of the knobs below) are chosen to reproduce the
shape the operator measured on a Blackwell host, not its hardware: plain decoding saturates near 773
tok/s in total (771 at a batch of 64), EAGLE-3 with 3 steps near 354 (its batch is capped at 48 by
SGLang's default with speculation: 354 at 48), and EAGLE-3 is ahead at concurrency 1 (about 140
against 90 tok/s; the two cross between a batch of 3 and 4).

Two of them are the server's to choose, from its environment, so that a test can move the crossover
(``model_knobs``; the server refuses to start, exit 1, on a value that is no number or out of range; an
empty one is the default, as for LAB_STANDIN_SLOWDOWN): LAB_STANDIN_ACCEPT_RATE the acceptance rate a,
in (0, 1) (default ACCEPT_RATE, 0.77), and LAB_STANDIN_DRAFT_COST the per-request cost of one draft
pass, seconds >= 0 (default DRAFT_COST, 0.00103). The crossover, the smallest batch b at which plain
decoding's tokens/s (b / step_time(b, 0)) reaches EAGLE-3's with 3 steps (b' * accept_length(3) /
step_time(b', 3), b' = min(b, 48)), is 2 at a = 0.6, 4 at the default 0.77, 6 at 0.9; 12 with a draft
cost of 0 at a = 0.77. A higher acceptance rate or a cheaper draft keeps EAGLE-3 ahead to a larger batch.

Draft steps per batch size follow what the installed sglang does (``draft_steps_by_batch_size``):
0 without speculation; the configured --speculative-num-steps with a speculative algorithm (3, EAGLE-3's
usual choice, when none is given); with --speculative-adaptive, the steps the release's own parser
chose for that batch size (adaptive.py); with SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE (env mode),
the configured steps: the demo patch (files/eagle_dynamic_spec_threshold.diff) only counts the batches
at or over its threshold, it never stops drafting, and the stand-in implements no more than the patch
does. Only an installed patch that declares the stop (the module-level line
``DYNAMIC_SPEC_STOPS_DRAFTING = True`` in sglang/srt/speculative/eagle_worker.py, read by
launch_server.sglang_patch_stops_drafting as sglang_carries_patch reads the patch's variable) gets 0
draft steps at batch sizes >= the threshold (``stop_drafting_from``). The demo patch does not declare it;
the test fixture tests/fixtures/patches/eagle_dynamic_spec_stops_drafting.diff (the demo patch plus that
line) does, without stopping anything in SGLang itself: the declaration is what the stand-in models.
"""
import collections
import math
import threading
import time

STEP_BASE = 0.010
TOKEN_COST = 0.00114
DRAFT_BASE = 0.00077
DRAFT_COST = 0.00103
PREFILL_COST = 0.001
ACCEPT_RATE = 0.77
DEFAULT_DRAFT_STEPS = 3
# SGLang's gen_throughput is logged every decode_log_interval (40) steps; the stand-in's window.
THROUGHPUT_WINDOW_STEPS = 40
SLOWDOWN_ENV = 'LAB_STANDIN_SLOWDOWN'
# The model's acceptance rate, in (0, 1), and the per-request cost of a draft pass, >= 0 (model_knobs).
ACCEPT_RATE_ENV = 'LAB_STANDIN_ACCEPT_RATE'
DRAFT_COST_ENV = 'LAB_STANDIN_DRAFT_COST'
# Seconds after the server turned healthy before LAB_STANDIN_SLOWDOWN applies (unset: from the start): a server
# that degrades only once it has served live traffic for a while.
DEGRADE_AFTER_ENV = 'LAB_STANDIN_DEGRADE_AFTER'
UNBOUNDED_BATCH = 1024


def step_time(batch_size, draft_steps, admitted=0, slowdown=1.0, draft_cost=DRAFT_COST):
    """Seconds of one decode step (see the module's docstring)."""
    verify = STEP_BASE + batch_size * TOKEN_COST * (draft_steps + 1)
    draft = draft_steps * (DRAFT_BASE + batch_size * draft_cost)
    return (verify + draft + admitted * PREFILL_COST) * slowdown


def accept_length(draft_steps, accept_rate=ACCEPT_RATE):
    """Tokens one step yields per request: 1 plain, 1 + a + ... + a^s with s draft steps."""
    return sum(accept_rate ** i for i in range(draft_steps + 1))


def model_knobs(environ):
    """(accept rate, draft cost) from LAB_STANDIN_ACCEPT_RATE and LAB_STANDIN_DRAFT_COST (unset or empty:
    ACCEPT_RATE, DRAFT_COST). Raises ValueError, naming the variable, for a value out of range or no number."""
    def number(name, default, fits, wanted):
        raw = (environ.get(name) or '').strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not fits(value):
            raise ValueError('%s must be %s, got %r' % (name, wanted, environ.get(name)))
        return value
    return (number(ACCEPT_RATE_ENV, ACCEPT_RATE, lambda value: 0 < value < 1, 'a number between 0 and 1, exclusive'),
            number(DRAFT_COST_ENV, DRAFT_COST, lambda value: value >= 0, 'a number of seconds >= 0'))


def draft_steps_by_batch_size(resolved, adaptive, max_batch, stop_drafting_from=None):
    """{batch size: draft steps} for 1..max_batch, from the server's resolved arguments; 0 from the batch
    size stop_drafting_from on (env mode under a patch that declares the stop; None or 0: never)."""
    if not resolved.get('speculative_algorithm'):
        return dict((size, 0) for size in range(1, max_batch + 1))
    configured = resolved.get('speculative_num_steps') or DEFAULT_DRAFT_STEPS
    routed = (adaptive or {}).get('initial_steps_by_batch_size') if resolved.get('speculative_adaptive') else None
    if not routed:
        steps = dict((size, configured) for size in range(1, max_batch + 1))
    else:
        largest = max(int(size) for size in routed)
        steps = dict((size, int(routed[str(min(size, largest))])) for size in range(1, max_batch + 1))
    if stop_drafting_from:
        steps.update((size, 0) for size in steps if size >= stop_drafting_from)
    return steps


class Request(object):
    """One sequence in the scheduler: its target length and what it has produced so far."""

    def __init__(self, max_new_tokens):
        self.max_new_tokens = max_new_tokens
        self.submitted = time.monotonic()
        self.produced = 0
        self.credit = 0.0
        self.events = collections.deque()
        self.changed = threading.Condition()
        self.finished = False

    def advance(self, tokens_per_step):
        """One step's output: the whole tokens credited so far, never past max_new_tokens."""
        self.credit += tokens_per_step
        gained = min(int(self.credit + 1e-9) - self.produced, self.max_new_tokens - self.produced)
        self.produced += gained
        self.finished = self.produced >= self.max_new_tokens
        with self.changed:
            self.events.append((self.produced, self.finished))
            self.changed.notify_all()

    def next_event(self, timeout):
        """(tokens so far, finished) of the next step, or None if none came within timeout."""
        with self.changed:
            if not self.events:
                self.changed.wait(timeout)
            return self.events.popleft() if self.events else None


class Scheduler(object):
    """The batch: requests wait in a queue and run max_running at a time, one step for all of them."""

    def __init__(self, steps_by_batch_size, max_running, speculative, slowdown=1.0, sleep=time.sleep, degrade_at=None,
                 accept_rate=ACCEPT_RATE, draft_cost=DRAFT_COST):
        self.steps_by_batch_size = steps_by_batch_size
        self.speculative = speculative
        self.max_running = max_running
        self.slowdown = slowdown
        # The model's knobs (model_knobs): the acceptance rate and the per-request cost of a draft pass.
        self.accept_rate = accept_rate
        self.draft_cost = draft_cost
        # Monotonic seconds from which the slowdown applies; None: always.
        self.degrade_at = degrade_at
        self.sleep = sleep
        self.waiting = collections.deque()
        self.running = []
        self.lock = threading.Condition()
        self.window = collections.deque(maxlen=THROUGHPUT_WINDOW_STEPS)
        self.gen_throughput = 0.0
        self.spec_accept_length = 0.0
        self.last_draft_steps = 0
        self.stopped = False

    def slowdown_now(self):
        if self.degrade_at is not None and time.monotonic() < self.degrade_at:
            return 1.0
        return self.slowdown

    def steps_for(self, batch_size):
        return self.steps_by_batch_size.get(batch_size, self.steps_by_batch_size[max(self.steps_by_batch_size)])

    def submit(self, max_new_tokens):
        request = Request(max(1, int(max_new_tokens)))
        with self.lock:
            self.waiting.append(request)
            self.lock.notify_all()
        return request

    def counts(self):
        """(running, waiting) as SGLang's scheduler reports them."""
        with self.lock:
            return len(self.running), len(self.waiting)

    def step(self):
        """Admit, run one step over the batch, retire the finished; False when there was nothing to run."""
        with self.lock:
            admitted = 0
            while self.waiting and len(self.running) < self.max_running:
                self.running.append(self.waiting.popleft())
                admitted += 1
            batch = list(self.running)
        if not batch:
            return False
        draft_steps = self.steps_for(len(batch))
        took = step_time(len(batch), draft_steps, admitted, self.slowdown_now(), self.draft_cost)
        self.sleep(took)
        before = sum(request.produced for request in batch)
        for request in batch:
            request.advance(accept_length(draft_steps, self.accept_rate))
        self.record(sum(request.produced for request in batch) - before, took, draft_steps, len(batch))
        with self.lock:
            self.running = [request for request in self.running if not request.finished]
        return True

    def record(self, tokens, took, draft_steps, batch_size):
        """SGLang's gauges: throughput over the last window of steps, acceptance of the last step."""
        self.window.append((tokens, took, batch_size))
        seconds = sum(entry[1] for entry in self.window)
        self.gen_throughput = sum(entry[0] for entry in self.window) / seconds if seconds else 0.0
        # Accepted tokens per request and verify step over the window, the bonus token included (1.0 while
        # drafting is off; a request's last step, cut at max_new_tokens, counts what it kept).
        verified = sum(entry[2] for entry in self.window)
        self.spec_accept_length = sum(entry[0] for entry in self.window) / float(verified) if self.speculative else 0.0
        self.last_draft_steps = draft_steps

    def run(self):
        """The scheduler thread's loop: step while there is work, wait for a request otherwise."""
        while not self.stopped:
            if not self.step():
                with self.lock:
                    if not self.waiting and not self.stopped:
                        self.lock.wait(0.5)

    def start(self):
        thread = threading.Thread(target=self.run, name='standin-scheduler')
        thread.daemon = True
        thread.start()
        return thread

    def stop(self):
        with self.lock:
            self.stopped = True
            self.lock.notify_all()


def scheduler_for(resolved, adaptive, environ, healthy_at=None, stop_drafting_from=None):
    """The server's scheduler, started: its batch bound, its draft steps (none from the batch size
    stop_drafting_from on, when given), LAB_STANDIN_ACCEPT_RATE and LAB_STANDIN_DRAFT_COST (model_knobs:
    ValueError for a bad value), LAB_STANDIN_SLOWDOWN (from LAB_STANDIN_DEGRADE_AFTER seconds after
    healthy_at, monotonic, when that is set)."""
    accept_rate, draft_cost = model_knobs(environ)
    # Without --max-running-requests SGLang sizes the batch from the KV cache: no bound the lab reaches.
    max_running = resolved.get('max_running_requests') or UNBOUNDED_BATCH
    steps = draft_steps_by_batch_size(resolved, adaptive, min(max_running, 256), stop_drafting_from)
    degrade_after = environ.get(DEGRADE_AFTER_ENV)
    degrade_at = healthy_at + float(degrade_after) if degrade_after and healthy_at is not None else None
    scheduler = Scheduler(steps, max_running, bool(resolved.get('speculative_algorithm')),
                          float(environ.get(SLOWDOWN_ENV) or 1.0), degrade_at=degrade_at,
                          accept_rate=accept_rate, draft_cost=draft_cost)
    scheduler.start()
    return scheduler


def output(request_id, prompt_tokens, produced, finished, started, verify_steps):
    """One /generate output in SGLang's shape: the text so far (one " tok" a unit) and its meta_info."""
    meta = {'id': request_id, 'finish_reason': {'type': 'length', 'length': produced} if finished else None,
            'prompt_tokens': prompt_tokens, 'weight_version': 'default', 'completion_tokens': produced,
            'cached_tokens': 0, 'e2e_latency': round(time.monotonic() - started, 4)}
    if verify_steps is not None:
        meta['spec_verify_ct'] = verify_steps
    return {'text': ' tok' * produced, 'meta_info': meta}


def outputs(request, request_id, prompt_tokens, speculative, deadline):
    """Each step's output of one request, in order, until it finishes (or deadline: monotonic seconds)."""
    started, steps = request.submitted, 0
    while time.monotonic() < deadline:
        event = request.next_event(min(1.0, max(0.0, deadline - time.monotonic())))
        if event is None:
            continue
        steps += 1
        produced, finished = event
        yield output(request_id, prompt_tokens, produced, finished, started, steps if speculative else None)
        if finished:
            return


def decode_report(scheduler, up_to=64):
    """What /server_info reports of the model (not an upstream field): its knobs, draft steps and tokens per step
    by batch size."""
    sizes = range(1, up_to + 1)
    return {'model': 'stand-in decode model (a model, not a measurement)', 'max_running_requests': scheduler.max_running,
            'slowdown': scheduler.slowdown, 'accept_rate': scheduler.accept_rate, 'draft_cost': scheduler.draft_cost,
            'draft_steps_by_batch_size': dict((str(b), scheduler.steps_for(b)) for b in sizes),
            'accept_length_by_batch_size': dict(
                (str(b), round(accept_length(scheduler.steps_for(b), scheduler.accept_rate), 4)) for b in sizes),
            'step_time_s_by_batch_size': dict(
                (str(b), round(step_time(b, scheduler.steps_for(b), 0, scheduler.slowdown, scheduler.draft_cost), 6))
                for b in sizes)}


def metrics_text(scheduler, model_name, live=()):
    """/metrics as SGLang's --enable-metrics exports these gauges (Prometheus text, labelled by model_name),
    then the live lines (live_metrics.LiveMetrics.lines) given."""
    running, waiting = scheduler.counts()
    label = '{model_name="%s"}' % model_name.replace('\\', '\\\\').replace('"', '\\"')
    gauges = [('sglang:num_running_reqs', 'The number of running requests.', running),
              ('sglang:num_queue_reqs', 'The number of requests in the waiting queue.', waiting),
              ('sglang:gen_throughput', 'The generation throughput (token/s).', scheduler.gen_throughput),
              ('sglang:spec_accept_length', 'The average acceptance length of speculative decoding.',
               scheduler.spec_accept_length)]
    if scheduler.speculative:
        gauges.append(('sglang:spec_num_steps', 'The speculative draft steps of the last step.', scheduler.last_draft_steps))
    lines = []
    for name, text, value in gauges:
        lines.extend(['# HELP %s %s' % (name, text), '# TYPE %s gauge' % name, '%s%s %s' % (name, label, float(value))])
    return '\n'.join(lines + list(live)) + '\n'
