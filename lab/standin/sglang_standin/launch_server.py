"""STAND-IN for ``python -m sglang.launch_server`` in the lab: no GPU, no model.

It behaves like SGLang where the redeploy playbook can observe it:
- strict argument parsing: an unknown flag exits 2; --speculative-num-steps, -eagle-topk and
  -num-draft-tokens must be given together, as SGLang requires;
- children titled ``sglang::scheduler_TP<rank>`` (one per --tp-size, each holding one GPU's device file
  and memory through the nvidia-smi simulator) and ``sglang::detokenizer``; scheduler K holds CUDA's device K:
  without CUDA_VISIBLE_DEVICES the GPU of nvidia-smi index K, with it the K-th GPU it names (an index or a UUID,
  as CUDA reads it: cuda_devices), and no other; too few GPUs named stops the start (exit 1), as CUDA's
  "invalid device ordinal" stops SGLang's;
- --nnodes, --node-rank and --dist-init-addr as SGLang's multi-node servers (ranks.py: its docstring is
  the model): each node holds tp_size/nnodes of the schedulers, rank 0 serves HTTP and becomes healthy
  only once every other rank joined it at the dist-init address, ranks > 0 serve no HTTP, and a rank
  lost without goodbye leaves rank 0 answering /health while generation fails and the other ranks hung;
- /health and /health_generate answer 503 during warm-up, then 200; /server_info (and the deprecated
  /get_server_info) return every resolved argument, the SGLANG_* environment (and CUDA_VISIBLE_DEVICES and
  CUDA_DEVICE_ORDER where set) and internal_states (the GPUs its schedulers hold: standin_gpus);
- POST /generate answers like SGLang ({"text", "meta_info"}) after SGLANG_STANDIN_GENERATE_DELAY seconds
  (read at start, default 0.2), so requests are really in flight while a fleet redeploy drains a host,
  and after its decode in the batched scheduler (decode.py: a model, not a measurement; max_new_tokens
  16 by default, as SGLang's); with "stream": true it answers SGLang's server-sent events, one per decode
  step, without the delay; --enable-metrics exports SGLang's gauges on /metrics (404 without it);
  /v1/loads and /get_load report them in SGLang 0.5.x's shapes; /model_info (and /get_model_info)
  answer what the SGLang router reads when it registers a worker;
- SIGTERM: /health and /health_generate answer 503 at once, requests in flight finish, new /generate
  requests are refused with 503 (upstream 0.5.12.post1 still accepts them while it drains: its
  generate path never checks the exit flag; refusing makes a host that still gets traffic when it is
  stopped visible to a load generator instead of silently stretching the drain), then the children stop
  and it exits 0.
- With SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE set, it refuses to start (exit 1) unless the installed
  sglang carries the dynamic-speculation patch that defines that variable. Set, it changes the decode
  model only where the installed patch declares that it stops drafting: the module-level line
  ``DYNAMIC_SPEC_STOPS_DRAFTING = True`` (STOPS_DRAFTING_DECLARATION) in sglang/srt/speculative/
  eagle_worker.py, beside the patch's variable (sglang_patch_stops_drafting). Then batches of that size
  and more decode with 0 draft steps (with a speculative algorithm, a value the patch's own parser
  refuses, not an integer >= 0, stops the start; 0 stops nothing). The demo patch,
  files/eagle_dynamic_spec_threshold.diff, only counts those batches and does not declare it, so under
  it the stand-in keeps drafting at every batch size; the test fixture
  tests/fixtures/patches/eagle_dynamic_spec_stops_drafting.diff (the demo patch plus the line) declares
  it. /server_info reports both: ``dynamic_spec_patch_present`` (the installed file, read at each call)
  and ``dynamic_spec_patch_stops_drafting`` (read at the start: what this server's scheduler does).
- --config FILE (YAML, .yaml/.yml) merged into the arguments as SGLang 0.5.12.post1 does
  (sglang/srt/server_args_config_parser.py: the file's options first, the command line's win);
  --api-key and --admin-api-key enforced as its auth middleware does (sglang/srt/utils/auth.py):
  /health* and /metrics stay open, every other endpoint (unknown ones included) answers 401 without
  ``Authorization: Bearer <api-key>`` once an API key is set. /server_info reports both keys, as SGLang's
  does (to whoever holds the API key). The stand-in has no admin endpoint.
- It loads before it serves, as SGLang does (its HTTP port is bound only once the model is loaded): at the start
  it reads every byte of the weight files (top-level *.safetensors and *.bin) in the --model-path folder and in
  the --speculative-draft-model-path folder, where each is a local folder (a hub id, a missing folder or one
  without weight files loads nothing), with real reads, and logs one line on stderr (files, bytes, seconds);
  a weight file it cannot read stops the start (exit 1). A cold start (files not in the page cache: lab/lab
  drop-cache) is slower than a warm one for that reason alone; the warm-up below comes after the load.
Lab knobs (environment): LAB_STANDIN_WARMUP seconds before healthy after the load (default 1.5),
LAB_STANDIN_GPU_MIB memory per scheduler (default 20610), LAB_STANDIN_DRAIN seconds (default 0.3),
LAB_STANDIN_SLOWDOWN a factor on every decode step (default 1: a deliberately slower server above it),
from LAB_STANDIN_DEGRADE_AFTER seconds after the server turned healthy when that is set (a server that degrades
only under live traffic), LAB_STANDIN_ERROR_RATE the share of /generate requests answered 500 (every n-th,
deterministically; counted as aborted), LAB_STANDIN_ACCEPT_RATE the decode model's acceptance rate (in
(0, 1), default 0.77) and LAB_STANDIN_DRAFT_COST its per-request cost of a draft pass (seconds >= 0,
default 0.00103), which move the batch size where plain decoding catches EAGLE-3 (decode.py); a value out
of range stops the start (exit 1). /metrics also exports SGLang's request histograms and counters
(live_metrics.py).
Drain gate (for fault tests): while the file /run/lab-standin-drain-gate exists, the drain after
SIGTERM lasts (as if requests were still in flight; at most 120 s), so a test can act at a known
point of the outage window: after the stop began, before anything else ran.
Generate gate (for drain tests): while the file /run/lab-standin-generate-gate exists and holds this
server's pid, its /generate requests stay in flight (at most 120 s), so a test holds a request on one
server for exactly as long as it needs, and the server started after it is not held.
"""
import argparse
import hmac
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_standin import decode, live_metrics, ranks
from sglang_standin.adaptive import resolve_adaptive

HOLDER = '/opt/lab/simulators/gpu_holder.py'
# What every scheduler keeps open besides its GPU (a CUDA process's control devices).
CONTROL_DEVICES = ['/dev/nvidiactl', '/dev/nvidia-uvm']
PATCH_ENV = 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'
# What an installed patch writes, at module level in eagle_worker.py, to declare that its code stops drafting
# at batch sizes >= PATCH_ENV (the stand-in then models that); the demo patch only counts and does not.
STOPS_DRAFTING_DECLARATION = 'DYNAMIC_SPEC_STOPS_DRAFTING = True'
DRAIN_GATE = '/run/lab-standin-drain-gate'
GENERATE_GATE = '/run/lab-standin-generate-gate'
ERROR_RATE_ENV = 'LAB_STANDIN_ERROR_RATE'
# The nvidia-smi simulator's GPUs (lab/simulators/gpu_config.py), read when CUDA_VISIBLE_DEVICES names some.
GPU_STATE_ENV = 'NVIDIA_SMI_SIM_STATE'
GPU_STATE_DEFAULT = '/var/lib/nvidia-smi-sim'
# Reported in /server_info's environment beside SGLANG_* (the stand-in's own field: upstream reports none), so that
# the role's verification (sglang_verify_environment) sees which GPUs the server was given.
CUDA_ENV = ('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER')


def gate_holds(path):
    try:
        with open(path) as handle:
            return handle.read().strip() == str(os.getpid())
    except OSError:
        return False
GENERATE_DELAY_ENV = 'SGLANG_STANDIN_GENERATE_DELAY'
# The weight files SGLang's default loader reads from a local model folder (top level only).
WEIGHT_SUFFIXES = ('.safetensors', '.bin')
# Large enough that a multi-GiB load is disk-bound, not bound by Python's loop.
READ_CHUNK = 8 << 20


def build_parser():
    parser = argparse.ArgumentParser(prog='sglang.launch_server', allow_abbrev=False)
    add = parser.add_argument
    add('--model-path', required=True)
    add('--tokenizer-path')
    add('--host', default='127.0.0.1')
    add('--port', type=int, default=30000)
    add('--tp-size', type=int, default=1)
    add('--dp-size', type=int, default=1)
    add('--mem-fraction-static', type=float)
    add('--max-running-requests', type=int)
    add('--context-length', type=int)
    add('--dtype', default='auto')
    add('--trust-remote-code', action='store_true')
    add('--served-model-name')
    add('--log-level', default='info')
    add('--speculative-algorithm', choices=['EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM'])
    add('--speculative-draft-model-path')
    add('--speculative-num-steps', type=int)
    add('--speculative-eagle-topk', type=int)
    add('--speculative-num-draft-tokens', type=int)
    add('--speculative-adaptive', action='store_true')
    add('--speculative-adaptive-config')
    add('--disable-overlap-schedule', action='store_true')
    add('--cuda-graph-max-bs', type=int)
    add('--api-key')
    add('--admin-api-key')
    add('--enable-metrics', action='store_true')
    # SGLang's loading options (0.5.23's parser: its defaults, reported in /server_info): accepted, loading unchanged.
    add('--weight-loader-prefetch-checkpoints', action='store_true')
    add('--weight-loader-prefetch-num-threads', type=int, default=4)
    add('--startup-weight-load-mode', choices=['serial', 'overlap'], default='serial')
    add('--config')
    ranks.add_flags(parser)
    return parser


def parse_flat_yaml(text):
    """The flat mappings SGLang config files hold (``key: value``, scalars and [a, b] lists), for a
    Python without PyYAML (the lab's sglang is installed with --no-deps). Quoted strings as YAML's
    double-quoted scalars that JSON shares, plain scalars as YAML 1.1 reads ints, floats and booleans."""
    def scalar(value):
        value = value.strip()
        if value.startswith('"'):
            return json.loads(value)
        if value.startswith("'"):
            return value[1:-1].replace("''", "'")
        if value.lower() in ('true', 'yes', 'on', 'false', 'no', 'off'):
            return value.lower() in ('true', 'yes', 'on')
        if value.lower() in ('', '~', 'null'):
            return None
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
        return value
    options = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith('#'):
            continue
        key, colon, value = stripped.partition(':')
        if not colon or line[0].isspace():
            raise ValueError('line %d is not a flat "key: value" entry' % number)
        value = value.strip()
        if value.startswith('[') and value.endswith(']'):
            options[key.strip()] = [scalar(item) for item in value[1:-1].split(',') if item.strip()]
        else:
            options[key.strip()] = scalar(value)
    return options


def merge_config(parser, argv):
    """argv with the --config file's options merged in, as SGLang's ConfigArgumentMerger does."""
    if '--config' not in argv:
        return argv
    if argv.count('--config') > 1:
        sys.exit('error: Multiple config files specified! Only one allowed.')
    index = argv.index('--config')
    if index == len(argv) - 1:
        sys.exit('error: No config file specified after --config flag!')
    path = argv[index + 1]
    if os.path.splitext(path)[1].lower() not in ('.yaml', '.yml'):
        sys.exit('error: Config file must be YAML format, got: %s' % os.path.splitext(path)[1])
    if not os.path.exists(path):
        sys.exit('error: Config file not found: %s' % path)
    with open(path) as handle:
        text = handle.read()
    try:
        import yaml
        options = yaml.safe_load(text)
    except ImportError:
        options = parse_flat_yaml(text)
    options = options or {}
    if not isinstance(options, dict):
        sys.exit('error: Config file must contain a dictionary at root level')
    store_true = set(action.dest for action in parser._actions if isinstance(action, argparse._StoreTrueAction))
    merged = []
    for key, value in options.items():
        if isinstance(value, bool):
            if key.replace('-', '_') in store_true:
                merged.extend(['--%s' % key] if value else [])
            else:
                merged.extend(['--%s' % key, str(value).lower()])
        elif isinstance(value, list):
            merged.extend(['--%s' % key] + [str(item) for item in value] if value else [])
        else:
            merged.extend(['--%s' % key, str(value)])
    return merged + argv[:index] + argv[index + 2:]


def authorized(path, authorization, api_key):
    """SGLang's decision for its ordinary endpoints (the stand-in has no admin one)."""
    if path.startswith('/health') or path.startswith('/metrics') or not api_key:
        return True
    scheme, _, token = (authorization or '').partition(' ')
    return scheme.lower() == 'bearer' and hmac.compare_digest(token.encode(), api_key.encode())


def resolve(args):
    """Validate and fill in defaults the way SGLang does for the flags the playbook uses."""
    spec = [args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens]
    if args.speculative_algorithm:
        if any(value is None for value in spec) and any(value is not None for value in spec):
            sys.exit('error: --speculative-num-steps, --speculative-eagle-topk and '
                     '--speculative-num-draft-tokens must be set together')
        if args.speculative_algorithm in ('EAGLE', 'EAGLE3') and not args.speculative_draft_model_path:
            sys.exit('error: --speculative-draft-model-path is required for %s' % args.speculative_algorithm)
        if args.max_running_requests is None:
            args.max_running_requests = 48  # SGLang's silent cap with speculation on
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    resolved = vars(args)
    # Merged before parsing, as SGLang does; not a server argument it reports.
    resolved.pop('config')
    return resolved


def installed_eagle_worker():
    """The text of the installed sglang's srt/speculative/eagle_worker.py, or None (no sglang, no such file)."""
    spec = importlib.util.find_spec('sglang')
    if spec is None or not spec.submodule_search_locations:
        return None
    worker = os.path.join(list(spec.submodule_search_locations)[0], 'srt', 'speculative', 'eagle_worker.py')
    try:
        with open(worker) as handle:
            return handle.read()
    except OSError:
        return None


def sglang_carries_patch():
    """Whether the installed eagle_worker.py defines the dynamic-speculation patch's variable."""
    return 'DYNAMIC_SPEC_DISABLE_ENV = "%s"' % PATCH_ENV in (installed_eagle_worker() or '')


def sglang_patch_stops_drafting():
    """Whether the installed patch declares that it stops drafting from its threshold on: it carries the patch
    (sglang_carries_patch) and STOPS_DRAFTING_DECLARATION is a line of its own at module level (no indent; a
    trailing comment allowed). Read from the file, as sglang_carries_patch reads it: importing it needs torch."""
    text = installed_eagle_worker() or ''
    declared = re.search(r'^%s[ \t]*(#.*)?$' % re.escape(STOPS_DRAFTING_DECLARATION), text, re.MULTILINE)
    return bool(declared) and 'DYNAMIC_SPEC_DISABLE_ENV = "%s"' % PATCH_ENV in text


def dynamic_spec_threshold(environ):
    """PATCH_ENV as the patch's own dynamic_spec_disable_batch_size() parses it: an integer >= 0, unset or
    empty 0 (0: upstream behaviour, drafting never stops). Raises ValueError for anything else."""
    raw = (environ.get(PATCH_ENV) or '0').strip() or '0'
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError('%s must be an integer >= 0, got %r' % (PATCH_ENV, raw))
    return value


def stop_drafting_from(resolved, environ, stops_drafting):
    """The batch size from which env mode decodes without drafting: PATCH_ENV's (dynamic_spec_threshold: ValueError
    for a bad value, as the patched EAGLE worker fails its start) where the installed patch declares the stop and
    the server speculates (only then does SGLang build that worker); None otherwise. 0 stops nothing."""
    if not (stops_drafting and resolved.get('speculative_algorithm')):
        return None
    return dynamic_spec_threshold(environ) or None


def weight_files(folders):
    """The weight files of the given folders that are local folders, in load order (sorted, each file once)."""
    files = []
    for folder in dict.fromkeys(folder for folder in folders if folder and os.path.isdir(folder)):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(WEIGHT_SUFFIXES) and not os.path.isdir(path):
                files.append(path)
    return files


def load_weights(resolved):
    """Read every byte of the server's weight files (weight_files) with real reads, to the end of each file
    (a FIFO included): (files, bytes, seconds). Raises OSError naming the file that could not be read."""
    started = time.monotonic()
    files = weight_files([resolved['model_path'], resolved.get('speculative_draft_model_path')])
    buffer = bytearray(READ_CHUNK)
    total = 0
    for path in files:
        try:
            with open(path, 'rb', buffering=0) as handle:
                while True:
                    count = handle.readinto(buffer)
                    if not count:
                        break
                    total += count
        except OSError as error:
            raise OSError('cannot read the weight file %s: %s' % (path, error)) from error
    return len(files), total, time.monotonic() - started


def simulated_gpus(environ):
    """[(nvidia-smi index, UUID)] of the simulator's GPUs, in index order."""
    path = os.path.join(environ.get(GPU_STATE_ENV, GPU_STATE_DEFAULT), 'gpus.json')
    try:
        with open(path) as handle:
            gpus = json.load(handle)['gpus']
    except (OSError, ValueError, KeyError) as error:
        raise ValueError('CUDA_VISIBLE_DEVICES is set but the GPUs cannot be read from %s: %s' % (path, error))
    return sorted((gpu['index'], gpu['uuid']) for gpu in gpus)


def cuda_devices(environ, wanted):
    """The nvidia-smi indices of CUDA's devices 0 .. wanted-1: without CUDA_VISIBLE_DEVICES, 0 .. wanted-1 (the
    stand-in's behaviour before it read the variable, and CUDA's when every GPU is visible); with it, the GPUs its
    entries name in their order, as CUDA reads them: an index (nvidia-smi's with CUDA_DEVICE_ORDER=PCI_BUS_ID, which
    the simulated GPUs, all alike, share with CUDA's fastest-first order), or a UUID or a prefix of one that names a
    single GPU; the first entry that names none, or a GPU named before, ends the list (CUDA ignores it and every entry
    after it). ValueError when fewer than `wanted` devices are visible (CUDA's "invalid device ordinal")."""
    named = environ.get('CUDA_VISIBLE_DEVICES')
    if named is None:
        return list(range(wanted))
    gpus = simulated_gpus(environ)
    visible = []
    for entry in (part.strip() for part in named.split(',')):
        if entry.isdigit():
            found = [index for index, uuid in gpus if index == int(entry)]
        else:
            found = [index for index, uuid in gpus if entry and uuid.startswith(entry)]
        if len(found) != 1 or found[0] in visible:
            break
        visible.append(found[0])
    if len(visible) < wanted:
        raise ValueError('CUDA_VISIBLE_DEVICES=%r makes %d GPU(s) visible (nvidia-smi indices %s of %s), this node '
                         'needs %d: invalid device ordinal' % (named, len(visible), visible,
                                                               [index for index, uuid in gpus], wanted))
    return visible[:wanted]


class Schedulers(object):
    """This node's children: its share of the TP schedulers (each holding one GPU: `devices`, the nvidia-smi index
    of each local CUDA device, from cuda_devices), and on rank 0 the detokenizer (SGLang runs no tokenizer side on
    ranks > 0)."""

    def __init__(self, resolved, devices=None):
        self.resolved = resolved
        self.devices = devices
        self.children = []

    def spawn(self):
        mib = os.environ.get('LAB_STANDIN_GPU_MIB', '20610')
        opens = [arg for device in CONTROL_DEVICES for arg in ('--open', device)]
        for rank, gpu in ranks.local_schedulers(self.resolved['tp_size'], self.resolved['nnodes'],
                                                self.resolved['node_rank']):
            index = gpu if self.devices is None else self.devices[gpu]
            self.children.append(subprocess.Popen(
                [sys.executable, HOLDER, '--title', 'sglang::scheduler_TP%d' % rank, '--hold', '%d=%s' % (index, mib)]
                + opens))
        if self.resolved['node_rank'] == 0:
            self.children.append(subprocess.Popen([sys.executable, HOLDER, '--title', 'sglang::detokenizer']))

    def any_died(self):
        return any(child.poll() is not None for child in self.children)

    def pids(self):
        return [child.pid for child in self.children]

    def stop(self):
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


class Server(object):
    def __init__(self, resolved, adaptive=None, group=None, stops_drafting=False, devices=None):
        self.resolved = resolved
        self.adaptive = adaptive
        # The other ranks (ranks.Leader) of a multi-node server; None for a single-node one.
        self.group = group
        self.started = time.monotonic()
        self.warmup = float(os.environ.get('LAB_STANDIN_WARMUP', '1.5'))
        self.generate_delay = float(os.environ.get(GENERATE_DELAY_ENV, '0.2'))
        self.schedulers = Schedulers(resolved, devices)
        # Set by SIGTERM: health turns 503 and new generate requests are refused from that moment.
        self.draining = threading.Event()
        self.in_flight = 0
        self.in_flight_changed = threading.Condition()
        # Whether the installed patch declared, at the start, that it stops drafting (sglang_patch_stops_drafting):
        # only then does env mode stop drafting from PATCH_ENV's batch size on.
        self.stops_drafting = stops_drafting
        stop_from = stop_drafting_from(resolved, os.environ, stops_drafting)
        self.scheduler = decode.scheduler_for(resolved, adaptive, os.environ, healthy_at=self.started + self.warmup,
                                              stop_drafting_from=stop_from)
        self.live = live_metrics.LiveMetrics()
        self.errors = live_metrics.ErrorRate(os.environ.get(ERROR_RATE_ENV))

    def ready(self):
        return time.monotonic() - self.started >= self.warmup

    def waiting_for_ranks(self):
        return self.group.waiting_for() if self.group is not None else []

    def unavailable(self):
        """Why /health answers 503 now (draining, warming up, a rank not joined yet), or None. A rank lost
        since does not show here: upstream's HTTP side never notices (sglang issue 4780)."""
        if self.draining.is_set():
            return 'shutting down'
        if not self.ready():
            return 'warming up'
        waiting = self.waiting_for_ranks()
        if waiting:
            return 'waiting for ranks %s to join at %s' % (', '.join(map(str, waiting)), self.group.addr)
        return None

    def generation_refusal(self):
        """(status, message) when generation cannot run now, or None: not serving (503), or a rank of
        the group gone (500, failing fast where upstream would hang in the collective)."""
        why = self.unavailable()
        if why:
            return 503, 'the server is %s' % why
        failure = self.group.failure() if self.group is not None else None
        return (500, failure) if failure else None

    def begin_request(self):
        """Count a generate request in: None, or (status, message) when the server does not take it."""
        with self.in_flight_changed:
            # Checked under the lock so that wait_drained cannot miss a request admitted just before it.
            refusal = self.generation_refusal()
            if refusal:
                return refusal
            self.in_flight += 1
            return None

    def end_request(self):
        with self.in_flight_changed:
            self.in_flight -= 1
            self.in_flight_changed.notify_all()

    def wait_drained(self):
        """Block until every admitted request has answered (each lasts generate_delay: bounded)."""
        with self.in_flight_changed:
            while self.in_flight > 0:
                self.in_flight_changed.wait(0.5)

    def loads(self):
        """/v1/loads as SGLang 0.5.x builds it: one entry per DP rank plus an aggregate."""
        # Requests still in their generate delay count as running, as they did before the scheduler.
        waiting = self.scheduler.counts()[1]
        running = max(0, self.in_flight - waiting)
        max_tokens = 500000
        used = running * 64  # a nominal KV footprint per running request; nothing real to report
        entries = []
        for rank in range(self.resolved['dp_size']):
            # The stand-in has no scheduler per rank: everything runs on rank 0.
            n = running if rank == 0 else 0
            entries.append({
                'dp_rank': rank, 'num_running_reqs': n, 'num_waiting_reqs': waiting if rank == 0 else 0,
                'num_used_tokens': used if rank == 0 else 0, 'num_total_tokens': used if rank == 0 else 0,
                'max_total_num_tokens': max_tokens, 'token_usage': round(float(used if rank == 0 else 0) / max_tokens, 4),
                'gen_throughput': round(self.scheduler.gen_throughput, 2) if rank == 0 else 0.0, 'cache_hit_rate': 0.0,
                'utilization': round(float(n) / (self.resolved['max_running_requests'] or 48), 4),
                'max_running_requests': self.resolved['max_running_requests'] or 48,
                'num_total_reqs': n + (waiting if rank == 0 else 0)})
        count = len(entries)
        aggregate = {
            'total_running_reqs': sum(e['num_running_reqs'] for e in entries),
            'total_waiting_reqs': sum(e['num_waiting_reqs'] for e in entries),
            'total_reqs': sum(e['num_running_reqs'] + e['num_waiting_reqs'] for e in entries),
            'total_used_tokens': sum(e['num_used_tokens'] for e in entries),
            'total_tokens': sum(e['num_total_tokens'] for e in entries),
            'avg_token_usage': round(sum(e['token_usage'] for e in entries) / count, 4),
            'avg_throughput': round(sum(e['gen_throughput'] for e in entries) / count, 2),
            'avg_utilization': round(sum(e['utilization'] for e in entries) / count, 4)}
        return {'timestamp': datetime.now(timezone.utc).isoformat(), 'version': 'standin',
                'dp_rank_count': count, 'loads': entries, 'aggregate': aggregate}

    def legacy_load(self):
        """/get_load: SGLang's deprecated projection of /v1/loads."""
        tic = time.perf_counter()
        return [{'dp_rank': e['dp_rank'], 'num_reqs': e['num_running_reqs'] + e['num_waiting_reqs'],
                 'num_waiting_reqs': e['num_waiting_reqs'], 'num_tokens': e['num_total_tokens'],
                 'num_pending_tokens': e['num_total_tokens'] - e['num_used_tokens'], 'ts_tic': tic}
                for e in self.loads()['loads']]

    def model_info(self):
        return {'model_path': self.resolved['model_path'], 'tokenizer_path': self.resolved['tokenizer_path'],
                'is_generation': True, 'preferred_sampling_params': None, 'weight_version': 'default',
                'has_image_understanding': False, 'has_audio_understanding': False, 'model_type': 'llama',
                'architectures': ['LlamaForCausalLM']}

    def generate_input(self, request):
        """(prompts, whether the request was a list, max_new_tokens) of a /generate body, as SGLang checks it."""
        texts = request.get('text')
        if texts is None and request.get('input_ids') is None:
            raise ValueError('Either text or input_ids should be provided.')
        params = request.get('sampling_params') or {}
        if not isinstance(params, dict):
            raise ValueError('sampling_params must be an object')
        # ignore_eos and temperature 0 change nothing here: the stand-in always runs to max_new_tokens.
        max_new = int(params.get('max_new_tokens', 16))  # SGLang's default
        batch = texts if isinstance(texts, list) else [texts if texts is not None else request.get('input_ids')]
        return batch, isinstance(texts, list), max_new

    def admit(self, prompts, max_new, delay):
        """The generate delay and gate (lab knobs), then each prompt into the scheduler: (request, id, prompt tokens)."""
        time.sleep(delay)
        gate_deadline = time.monotonic() + 120
        while gate_holds(GENERATE_GATE) and time.monotonic() < gate_deadline:
            time.sleep(0.02)
        return [(self.scheduler.submit(max_new), uuid.uuid4().hex, len(str(prompt).split())) for prompt in prompts]

    def recorded(self, outputs, received, streaming):
        """The outputs as they come, each step's time recorded for /metrics once the last one is out."""
        first = last = None
        gaps, tokens = [], 0
        for output in outputs:
            now = time.monotonic()
            if first is None:
                first = now
            else:
                gaps.append(now - last)
            last, tokens = now, output['meta_info']['completion_tokens']
            yield output
        self.live.finished(streaming, first - received if first is not None else None, gaps,
                           time.monotonic() - received, tokens)

    def generate(self, request):
        """One /generate answer in SGLang's non-streaming shape (a list for a batch of prompts)."""
        received = time.monotonic()
        prompts, is_list, max_new = self.generate_input(request)
        answers = []
        for scheduled, request_id, prompt_tokens in self.admit(prompts, max_new, self.generate_delay):
            last = None
            for last in self.recorded(decode.outputs(scheduled, request_id, prompt_tokens, self.scheduler.speculative,
                                                     time.monotonic() + 600), received, False):
                pass
            answers.append(last)
        return answers if is_list else answers[0]

    def stream(self, request):
        """The outputs of one streamed /generate, step by step. No generate delay: a streamed request
        is in flight for as long as it decodes, and the delay would only add to its time to first token."""
        prompts, is_list, max_new = self.generate_input(request)
        if is_list:
            raise ValueError('the stand-in streams one prompt a request')
        received = time.monotonic()
        (scheduled, request_id, prompt_tokens), = self.admit(prompts, max_new, 0)
        return self.recorded(decode.outputs(scheduled, request_id, prompt_tokens, self.scheduler.speculative,
                                            time.monotonic() + 600), received, True)

    def info(self):
        info = dict(self.resolved)
        info['environment'] = dict((k, v) for k, v in os.environ.items() if k.startswith('SGLANG_') or k in CUDA_ENV)
        info['dynamic_spec_patch_present'] = sglang_carries_patch()
        # Not an upstream field: whether the installed patch declared that it stops drafting (read at the start).
        info['dynamic_spec_patch_stops_drafting'] = self.stops_drafting
        info['internal_states'] = [{'pid': os.getpid(), 'children': self.schedulers.pids(),
                                    'standin_gpus': self.schedulers.devices}]
        if self.group is not None:
            # Not an upstream field: which ranks joined this rank 0, and which are gone since.
            info['internal_states'][0]['standin_ranks'] = self.group.report()
        if self.adaptive is not None:
            # Not an upstream field: what the installed release's own parser made of the adaptive config.
            info['internal_states'][0]['standin_adaptive'] = self.adaptive
        # Not an upstream field either: the stand-in's decode model per batch size.
        info['internal_states'][0]['standin_decode'] = decode.decode_report(self.scheduler)
        info['version'] = 'standin'
        return info


class HTTPServer(ThreadingHTTPServer):
    # uvicorn's listen backlog (2048), not socketserver's 5: a benchmark's 64 connections at once
    # would otherwise overflow the accept queue and be reset.
    request_queue_size = 2048


def make_handler(server):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_text(self, code, text):
            data = text.encode()
            self.send_response(code)
            self.send_header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_stream(self, outputs):
            """Server-sent events as SGLang's generate_request streams them: each output, then [DONE]."""
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream')
            self.send_header('Cache-Control', 'no-cache')
            self.end_headers()
            try:
                for output in outputs:
                    self.wfile.write(b'data: ' + json.dumps(output).encode() + b'\n\n')
                self.wfile.write(b'data: [DONE]\n\n')
            except OSError:
                pass  # the client went away; its request still decodes to the end (the stand-in does not abort)

        def read_body(self):
            """The request body, sent with a Content-Length or chunked: smg forwards a client's body chunked,
            which SGLang's server (uvicorn) reads as any other."""
            if 'chunked' not in (self.headers.get('Transfer-Encoding') or '').lower():
                return self.rfile.read(int(self.headers.get('Content-Length') or 0))
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b';', 1)[0].strip() or b'0', 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):  # trailers, then the blank line
                        pass
                    return b''.join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()

        def refused(self, path):
            """401 as SGLang's auth middleware answers it, before any routing (unknown paths included)."""
            if authorized(path, self.headers.get('Authorization'), server.resolved['api_key']):
                return False
            self.read_body()
            self._send(401, {'error': 'Unauthorized'})
            return True

        def do_GET(self):
            path = self.path.split('?', 1)[0]
            if self.refused(path):
                return
            if path in ('/health', '/health_generate'):
                # /health_generate runs a real generation, which needs every rank: it fails where /health does not.
                why = server.unavailable() if path == '/health' else (server.generation_refusal() or (None, None))[1]
                if why:
                    self._send(503, {'error': why})
                else:
                    self._send(200, {})
            elif path in ('/server_info', '/get_server_info'):
                self._send(200, server.info())
            elif path in ('/model_info', '/get_model_info'):
                self._send(200, server.model_info())
            elif path == '/v1/loads':
                self._send(200, server.loads())
            elif path == '/get_load':
                self._send(200, server.legacy_load())
            elif path == '/metrics' and server.resolved['enable_metrics']:
                self.send_text(200, decode.metrics_text(server.scheduler, server.resolved['served_model_name'],
                                                        server.live.lines(server.resolved['served_model_name'])))
            elif path in ('/v1/models',):
                self._send(200, {'data': [{'id': server.resolved['served_model_name']}]})
            else:
                self._send(404, {'error': 'not found'})

        def do_POST(self):
            path = self.path.split('?', 1)[0]
            if self.refused(path):
                return
            if path != '/generate':
                self._send(404, {'error': 'not found'})
                return
            try:
                request = json.loads(self.read_body() or b'null')
                if not isinstance(request, dict):
                    raise ValueError('the body must be a JSON object')
            except ValueError as exc:
                self._send(400, {'error': {'message': str(exc)}})
                return
            refusal = server.begin_request()
            if refusal:
                self._send(refusal[0], {'error': {'message': refusal[1]}})
                return
            try:
                if server.errors.next_fails():
                    # Counted as upstream counts an aborted request; the client sees a failed one.
                    server.live.failed()
                    self._send(500, {'error': {'message': 'stand-in error (%s)' % ERROR_RATE_ENV}})
                    return
                try:
                    answer = server.stream(request) if request.get('stream') else server.generate(request)
                except ValueError as exc:
                    self._send(400, {'error': {'message': str(exc)}})
                    return
                if request.get('stream'):
                    self.send_stream(answer)
                else:
                    self._send(200, answer)
            finally:
                server.end_request()

        do_PUT = do_POST

        def log_message(self, fmt, *args):
            sys.stderr.write('standin http: %s\n' % (fmt % args))
    return Handler


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(merge_config(parser, list(sys.argv[1:] if argv is None else argv)))
    ranks.check_flags(parser, args)
    resolved = resolve(args)
    if os.environ.get(PATCH_ENV) and not sglang_carries_patch():
        sys.exit('error: %s is set but the installed sglang lacks the dynamic-speculation patch' % PATCH_ENV)
    stops_drafting = sglang_patch_stops_drafting()
    try:
        decode.model_knobs(os.environ)
        stop_drafting_from(resolved, os.environ, stops_drafting)
        devices = cuda_devices(os.environ, len(ranks.local_schedulers(resolved['tp_size'], resolved['nnodes'],
                                                                      resolved['node_rank'])))
    except ValueError as error:
        sys.exit('error: %s' % error)
    try:
        # Before anything binds or spawns, as SGLang loads before uvicorn starts; every rank loads its weights.
        files, size, seconds = load_weights(resolved)
    except OSError as error:
        sys.exit('error: %s' % error)
    sys.stderr.write('standin: loaded %d weight files, %d bytes in %.3f s\n' % (files, size, seconds))
    sys.stderr.flush()
    if resolved['node_rank'] > 0:
        # No HTTP, no tokenizer side: only its schedulers, in the group rank 0 leads.
        return ranks.run_follower(resolved, Schedulers(resolved, devices))
    # As SGLang: only a server started with --speculative-adaptive reads its config file.
    adaptive = resolve_adaptive(resolved) if resolved['speculative_adaptive'] else None
    group = ranks.Leader(resolved['nnodes'], resolved['dist_init_addr']) if resolved['nnodes'] > 1 else None
    server = Server(resolved, adaptive, group, stops_drafting, devices)
    httpd = HTTPServer((resolved['host'], resolved['port']), make_handler(server))
    if group is not None:
        try:
            group.listen()
        except OSError as exc:
            sys.exit('error: cannot listen on --dist-init-addr %s: %s' % (resolved['dist_init_addr'], exc))
    server.schedulers.spawn()
    stopping = threading.Event()

    def on_term(signum, frame):
        # Health turns 503 and new work is refused from this moment, as SGLang's tokenizer manager does.
        server.draining.set()
        stopping.set()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    sys.stderr.write('standin: serving %s on %s:%d (pid %d)\n' % (resolved['model_path'], resolved['host'],
                                                                 resolved['port'], os.getpid()))
    sys.stderr.flush()
    while not stopping.wait(0.2):
        if server.schedulers.any_died():
            sys.stderr.write('standin: a child died, exiting\n')
            break
    server.draining.set()
    # The listener stays open through the drain (answering 503 to health and new work, as SGLang's
    # does) and closes only once the requests in flight have answered.
    server.wait_drained()
    time.sleep(float(os.environ.get('LAB_STANDIN_DRAIN', '0.3')))
    gate_deadline = time.monotonic() + 120
    while os.path.exists(DRAIN_GATE) and time.monotonic() < gate_deadline:
        time.sleep(0.05)
    httpd.shutdown()
    httpd.server_close()
    if group is not None and stopping.is_set():
        # A graceful stop only, after the drain (the requests in flight needed every rank): a crash says
        # nothing, and the other ranks hang (ranks.py).
        group.goodbye()
    server.schedulers.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
