"""A tiny stand-in HTTP server for the guard and server-module tests: /health 200 after --warmup
seconds, /server_info reporting --max-running-requests; exits 2 on an unknown flag, as argparse does."""
import argparse
import json
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--max-running-requests', type=int, default=1)
    parser.add_argument('--warmup', type=float, default=0.0)
    args = parser.parse_args()
    ready_at = time.monotonic() + args.warmup

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == '/health':
                code, body = (200, b'') if time.monotonic() >= ready_at else (503, b'')
            elif self.path == '/server_info':
                code, body = 200, json.dumps({'max_running_requests': args.max_running_requests}).encode()
            else:
                code, body = 404, b''
            self.send_response(code)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(('127.0.0.1', args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == '__main__':
    main()
