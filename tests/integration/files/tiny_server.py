"""A tiny stand-in HTTP server for the guard, server-module and router tests.

What it answers, shaped as SGLang 0.5.x answers it: /health and /health_generate (200 after --warmup
seconds, 503 once SIGTERM started the drain), /server_info and /get_server_info (reporting
--max-running-requests), /get_model_info, /v1/loads and /get_load (the requests in flight), and
POST /generate (answered after --generate-delay seconds and once --hold-file is gone; 500 with
--broken-generate). Threaded, so
requests overlap. On SIGTERM it refuses new generations, lets the ones in flight finish, then exits,
as SGLang does; with --drain-hold-file it also waits while that file exists. With --leave-child it starts
a child in its own session that ignores SIGTERM and is left behind when it exits (the orphaned scheduler a
crashed SGLang leaves). With --load-hold-file it binds its port only once that file is gone, as SGLang binds
only after its model load. Exits 2 on an unknown flag, as argparse does.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--max-running-requests', type=int, default=1)
    parser.add_argument('--warmup', type=float, default=0.0)
    parser.add_argument('--generate-delay', type=float, default=0.0)
    parser.add_argument('--broken-generate', action='store_true')
    # Tests hold a generation in flight for as long as they need rather than guessing a delay: it
    # waits while --hold-file exists; every load reading is logged to --loads-log.
    parser.add_argument('--hold-file')
    parser.add_argument('--loads-log')
    # An older server: neither /v1/loads nor /get_load.
    parser.add_argument('--no-loads', action='store_true')
    parser.add_argument('--drain-hold-file')
    # SGLang binds its HTTP port only once its model is loaded: while this file exists the server "loads", unbound.
    parser.add_argument('--load-hold-file')
    # The file the modules read the server's API key from, as SGLang's --config (the key is not enforced here).
    parser.add_argument('--config')
    parser.add_argument('--leave-child', action='store_true')
    args = parser.parse_args()
    ready_at = time.monotonic() + args.warmup
    state = {'in_flight': 0, 'draining': False}
    lock = threading.Lock()

    def loads():
        count = state['in_flight']
        if args.loads_log:
            with open(args.loads_log, 'a') as log:
                log.write('%d\n' % count)
        return {'timestamp': time.time(), 'version': 'tiny', 'dp_rank_count': 1,
                'loads': [{'dp_rank': 0, 'num_running_reqs': count, 'num_waiting_reqs': 0, 'num_total_reqs': count}],
                'aggregate': {'total_running_reqs': count, 'total_waiting_reqs': 0, 'total_reqs': count}}

    class Handler(BaseHTTPRequestHandler):
        def reply(self, code, document=None):
            body = json.dumps(document).encode() if document is not None else b''
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = self.path.split('?')[0]
            if path in ('/health', '/health_generate'):
                self.reply(200 if time.monotonic() >= ready_at and not state['draining'] else 503)
            elif path in ('/server_info', '/get_server_info'):
                self.reply(200, {'max_running_requests': args.max_running_requests})
            elif path in ('/get_model_info', '/model_info'):
                self.reply(200, {'model_path': 'tiny', 'is_generation': True})
            elif path == '/v1/loads' and not args.no_loads:
                self.reply(200, loads())
            elif path == '/get_load' and not args.no_loads:
                self.reply(200, [{'dp_rank': 0, 'num_reqs': loads()['aggregate']['total_reqs'], 'num_waiting_reqs': 0}])
            else:
                self.reply(404)

        def do_POST(self):
            self.rfile.read(int(self.headers.get('Content-Length') or 0))
            if self.path != '/generate':
                return self.reply(404)
            with lock:
                if state['draining']:
                    return self.reply(503, {'error': 'shutting down'})
                state['in_flight'] += 1
            try:
                time.sleep(args.generate_delay)
                while args.hold_file and os.path.exists(args.hold_file):
                    time.sleep(0.02)
                if args.broken_generate:
                    return self.reply(500, {'error': 'generation failed'})
                self.reply(200, {'text': ' pong', 'meta_info': {'completion_tokens': 1}})
            finally:
                with lock:
                    state['in_flight'] -= 1

        def log_message(self, *args):
            pass

    while args.load_hold_file and os.path.exists(args.load_hold_file):
        time.sleep(0.02)
    server = ThreadingHTTPServer(('127.0.0.1', args.port), Handler)

    if args.leave_child:
        # Bounded, so that a failed test cannot leave it behind for long.
        subprocess.Popen([sys.executable, '-c', 'import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
                          'time.sleep(120)\n'])

    def drain_then_exit():
        while state['in_flight'] or (args.drain_hold_file and os.path.exists(args.drain_hold_file)):
            time.sleep(0.02)
        server.shutdown()

    def on_term(*_):
        state['draining'] = True
        threading.Thread(target=drain_then_exit, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    server.serve_forever()


if __name__ == '__main__':
    main()
