"""STAND-IN for ``python -m sglang.launch_server`` in the lab: no GPU, no model.

It behaves like SGLang where the redeploy playbook can observe it:
- strict argument parsing: an unknown flag exits 2; --speculative-num-steps, -eagle-topk and
  -num-draft-tokens must be given together, as SGLang requires;
- children titled ``sglang::scheduler_TP<rank>`` (one per --tp-size, each holding /dev/nvidia<rank>
  and GPU memory through the nvidia-smi simulator) and ``sglang::detokenizer``;
- /health and /health_generate answer 503 during warm-up, then 200; /server_info (and the deprecated
  /get_server_info) return every resolved argument, the SGLANG_* environment and internal_states;
- SIGTERM: stop serving, drain, stop the children, exit 0.
- With SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE set, it refuses to start (exit 1) unless the installed
  sglang carries the dynamic-speculation patch that defines that variable.
Lab knobs (environment): LAB_STANDIN_WARMUP seconds before healthy (default 1.5),
LAB_STANDIN_GPU_MIB memory per scheduler (default 20610), LAB_STANDIN_DRAIN seconds (default 0.3).
Drain gate (for fault tests): while the file /run/lab-standin-drain-gate exists, the drain after
SIGTERM lasts (as if requests were still in flight; at most 120 s), so a test can act at a known
point of the outage window: after the stop began, before anything else ran.
"""
import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOLDER = '/opt/lab/simulators/gpu_holder.py'
PATCH_ENV = 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'
DRAIN_GATE = '/run/lab-standin-drain-gate'


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
    return parser


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
    if args.speculative_adaptive_config:
        with open(args.speculative_adaptive_config) as handle:
            json.load(handle)
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    return vars(args)


def sglang_carries_patch():
    spec = importlib.util.find_spec('sglang')
    if spec is None or not spec.submodule_search_locations:
        return False
    worker = os.path.join(list(spec.submodule_search_locations)[0], 'srt', 'speculative', 'eagle_worker.py')
    try:
        with open(worker) as handle:
            return 'DYNAMIC_SPEC_DISABLE_ENV = "%s"' % PATCH_ENV in handle.read()
    except OSError:
        return False


class Server(object):
    def __init__(self, resolved):
        self.resolved = resolved
        self.started = time.monotonic()
        self.warmup = float(os.environ.get('LAB_STANDIN_WARMUP', '1.5'))
        self.children = []

    def ready(self):
        return time.monotonic() - self.started >= self.warmup

    def info(self):
        info = dict(self.resolved)
        info['environment'] = dict((k, v) for k, v in os.environ.items() if k.startswith('SGLANG_'))
        info['dynamic_spec_patch_present'] = sglang_carries_patch()
        info['internal_states'] = [{'pid': os.getpid(), 'children': [c.pid for c in self.children]}]
        info['version'] = 'standin'
        return info

    def spawn_children(self):
        mib = os.environ.get('LAB_STANDIN_GPU_MIB', '20610')
        for rank in range(self.resolved['tp_size']):
            self.children.append(subprocess.Popen(
                [sys.executable, HOLDER, '--title', 'sglang::scheduler_TP%d' % rank, '--hold', '%d=%s' % (rank, mib),
                 '--open', '/dev/nvidiactl', '--open', '/dev/nvidia-uvm']))
        self.children.append(subprocess.Popen([sys.executable, HOLDER, '--title', 'sglang::detokenizer']))

    def stop_children(self):
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def make_handler(server):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split('?', 1)[0]
            if path in ('/health', '/health_generate'):
                if server.ready():
                    self._send(200, {})
                else:
                    self._send(503, {'error': 'warming up'})
            elif path in ('/server_info', '/get_server_info'):
                self._send(200, server.info())
            elif path in ('/v1/models',):
                self._send(200, {'data': [{'id': server.resolved['served_model_name']}]})
            else:
                self._send(404, {'error': 'not found'})

        def log_message(self, fmt, *args):
            sys.stderr.write('standin http: %s\n' % (fmt % args))
    return Handler


def main(argv=None):
    resolved = resolve(build_parser().parse_args(argv))
    if os.environ.get(PATCH_ENV) and not sglang_carries_patch():
        sys.exit('error: %s is set but the installed sglang lacks the dynamic-speculation patch' % PATCH_ENV)
    server = Server(resolved)
    httpd = ThreadingHTTPServer((resolved['host'], resolved['port']), make_handler(server))
    server.spawn_children()
    stopping = threading.Event()

    def on_term(signum, frame):
        stopping.set()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    sys.stderr.write('standin: serving %s on %s:%d (pid %d)\n' % (resolved['model_path'], resolved['host'],
                                                                 resolved['port'], os.getpid()))
    sys.stderr.flush()
    while not stopping.wait(0.2):
        if any(child.poll() is not None for child in server.children):
            sys.stderr.write('standin: a child died, exiting\n')
            break
    httpd.shutdown()
    time.sleep(float(os.environ.get('LAB_STANDIN_DRAIN', '0.3')))
    gate_deadline = time.monotonic() + 120
    while os.path.exists(DRAIN_GATE) and time.monotonic() < gate_deadline:
        time.sleep(0.05)
    server.stop_children()
    return 0


if __name__ == '__main__':
    sys.exit(main())
