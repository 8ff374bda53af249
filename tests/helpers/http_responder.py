"""A real HTTP server on 127.0.0.1 whose answers a test scripts, and which records every request it got.

The modules under test talk HTTP with http.client straight to an address; a responder on a free loopback
port is the OS edge they reach, so a test can assert what a module sent (method, path, headers, body) and
decide what it hears back (status, JSON body, a delay), without replacing any of the module's own code.

    def test_x(http_responder):
        http_responder.route('GET', '/health', status=200)
        http_responder.route('GET', '/workers', replies=[Reply(json={'workers': []}), Reply(status=503)])
        http_responder.route('DELETE', re.compile(r'/workers/(?P<id>.+)'), handler=lambda request, match: ...)
        ... run the module against http_responder.url ...
        assert http_responder.requests[0].headers['Authorization'] == 'Bearer k'

A request no route matches is answered 404 (and recorded). Routes added later win over earlier ones, so a
test can change what a path answers half-way. A delay waits on an event the fixture sets when the test
ends, so a slow route never outlives its test.
"""
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Reply(object):
    """What one request is answered: status, a JSON document (or raw body bytes), extra headers, a delay."""

    def __init__(self, status=200, json=None, body=None, delay=0.0, headers=None):
        self.status = status
        self.json = json
        self.body = body
        self.delay = delay
        self.headers = dict(headers or {})

    def payload(self):
        if self.body is not None:
            return self.body if isinstance(self.body, bytes) else self.body.encode('utf-8')
        if self.json is not None:
            return json.dumps(self.json).encode('utf-8')
        return b''


class Request(object):
    """One request as the responder received it."""

    def __init__(self, method, path, query, headers, body):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    @property
    def json(self):
        """The body parsed as JSON (None when empty)."""
        return json.loads(self.body.decode('utf-8')) if self.body else None

    def __repr__(self):
        return '<%s %s%s>' % (self.method, self.path, ' ' + repr(self.body) if self.body else '')


class _Route(object):
    def __init__(self, method, path, replies, handler):
        self.method = method
        self.path = path
        self.replies = list(replies)
        self.handler = handler

    def match(self, method, path):
        if method != self.method:
            return None
        if isinstance(self.path, str):
            return path if path == self.path else None
        return self.path.fullmatch(path)

    def answer(self, request, match):
        if self.handler is not None:
            reply = self.handler(request, match)
            return reply if isinstance(reply, Reply) else Reply(*reply)
        # Each reply in turn; the last one answers every request after it.
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


class HttpResponder(object):
    """A threaded HTTP server on a free 127.0.0.1 port, answering as scripted with route()."""

    def __init__(self):
        self.requests = []
        self._routes = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = None
        self._thread = None

    @property
    def url(self):
        """Base URL, without a trailing slash."""
        return 'http://127.0.0.1:%d' % self._server.server_address[1]

    def fileno(self):
        """The listening socket's descriptor: a process started with it (Popen's pass_fds) holds the port as the
        server it stands for would, so _server's check of whose port it is finds that process."""
        return self._server.fileno()

    def route(self, method, path, status=200, json=None, body=None, delay=0.0, headers=None, replies=None,
              handler=None):
        """Script what METHOD PATH answers.

        path: the exact path (no query string), or a compiled regular expression matched against all of it.
        replies: Replies given in turn, the last one repeated (instead of status/json/body/delay/headers).
        handler: handler(request, match) -> Reply (or a tuple of Reply's arguments), for a stateful imitation.
        """
        if replies is None:
            replies = [Reply(status, json, body, delay, headers)]
        with self._lock:
            self._routes.insert(0, _Route(method, path, replies, handler))
        return self

    def requests_to(self, method=None, path=None):
        """The recorded requests, only those of that method and path when given."""
        with self._lock:
            return [request for request in self.requests if (method is None or request.method == method)
                    and (path is None or request.path == path)]

    def _answer(self, request):
        with self._lock:
            self.requests.append(request)
            routes = list(self._routes)
        for route in routes:
            match = route.match(request.method, request.path)
            if match is not None:
                with self._lock:
                    return route.answer(request, match)
        return Reply(404, body='no route for %s %s' % (request.method, request.path))

    def start(self):
        responder = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                path, dummy, query = self.path.partition('?')
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else b''
                reply = responder._answer(Request(self.command, path, query, dict(self.headers.items()), body))
                if reply.delay:
                    responder._stopping.wait(reply.delay)
                payload = reply.payload()
                try:
                    self.send_response(reply.status)
                    headers = dict({'Content-Type': 'application/json', 'Content-Length': str(len(payload))},
                                   **reply.headers)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up waiting (its request timeout): what the delay was for

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = _handle

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={'poll_interval': 0.01},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop answering; the port then refuses connections."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class RouterImitation(object):
    """The router's worker API as sglang-router 0.3.2 answers it.

    A change shows from the read after the one `lag` reads after it (never in the 202's own moment); an added
    worker is then listed unhealthy for `unhealthy_reads` reads, as the router's first health checks run.
    """

    def __init__(self, responder, workers=(), lag=0, unhealthy_reads=0, api_key=None):
        self.responder = responder
        self.workers = [dict(id='w-%d' % index, url=url, is_healthy=True, load=0)
                        for index, url in enumerate(workers)]
        self.lag = lag
        self.unhealthy_reads = unhealthy_reads
        self.api_key = api_key
        self.pending = []
        responder.route('GET', '/workers', handler=self.listing)
        responder.route('DELETE', re.compile(r'/workers/(?P<id>[^/]+)'), handler=self.delete)
        responder.route('POST', '/workers', handler=self.add)

    def refused(self, request):
        if self.api_key and request.headers.get('Authorization') != 'Bearer %s' % self.api_key:
            return Reply(401, json={'error': 'Unauthorized'})
        return None

    def listing(self, request, match):
        refused = self.refused(request)
        if refused:
            return refused
        for change in list(self.pending):
            change['reads'] -= 1
            if change['reads'] < 0:
                change['apply']()
                self.pending.remove(change)
        for worker in self.workers:
            if not worker['is_healthy'] and worker.get('unhealthy_reads', 0) > 0:
                worker['unhealthy_reads'] -= 1
            elif worker.get('unhealthy_reads') == 0:
                worker['is_healthy'] = True
        listed = [dict((key, worker[key]) for key in ('id', 'url', 'is_healthy', 'load')) for worker in self.workers]
        return Reply(json={'workers': listed, 'total': len(listed)})

    def delete(self, request, match):
        refused = self.refused(request)
        if refused:
            return refused
        wanted = match.group('id')
        if not any(worker['id'] == wanted for worker in self.workers):
            return Reply(404, json={'error': 'worker %s not found' % wanted})
        def remove():
            self.workers = [worker for worker in self.workers if worker['id'] != wanted]
        self.pending.append({'reads': self.lag, 'apply': remove})
        return Reply(202, json={'status': 'accepted', 'worker_id': wanted})

    def add(self, request, match):
        refused = self.refused(request)
        if refused:
            return refused
        url = request.json['url']
        entry = dict(id='w-new', url=url, is_healthy=self.unhealthy_reads == 0, load=0,
                     unhealthy_reads=self.unhealthy_reads)
        self.pending.append({'reads': self.lag, 'apply': lambda: self.workers.append(entry)})
        return Reply(202, json={'status': 'accepted', 'worker_id': 'w-new'})

    def urls(self):
        return sorted(worker['url'] for worker in self.workers)

    def calls(self):
        """METHOD PATH of each request the router got, in order."""
        return ['%s %s' % (request.method, request.path) for request in self.responder.requests]


@pytest.fixture
def http_responder():
    """One started HttpResponder, stopped when the test ends."""
    with HttpResponder() as responder:
        yield responder


@pytest.fixture
def http_responders():
    """Make more started HttpResponders (make()); each is stopped when the test ends."""
    made = []

    def make():
        responder = HttpResponder().start()
        made.append(responder)
        return responder
    yield make
    for responder in made:
        responder.stop()


def closed_port_url():
    """A loopback URL nothing answers at (connection refused): a responder started and stopped."""
    responder = HttpResponder().start()
    url = responder.url
    responder.stop()
    return url



def static_server_launch(launch_file, docroot, port, documents):
    """Write a launch.json whose server is Python's own `http.server` on 127.0.0.1:port, serving `documents`.

    documents: {URL path: JSON document}, each written as a file under docroot (so GET /health answers 200
    once 'health' is among them, 404 otherwise). A real local HTTP server the detached manager starts and
    stops like SGLang (`python -m MODULE ARGS`), which, unlike tests/integration/files/tiny_server.py,
    exits the moment SIGTERM reaches it: a stop costs no drain. Returns the server's base URL.
    """
    for path, document in documents.items():
        target = os.path.join(str(docroot), path.lstrip('/'))
        if not os.path.isdir(os.path.dirname(target)):
            os.makedirs(os.path.dirname(target))
        with open(target, 'w') as handle:
            json.dump(document, handle)
    with open(str(launch_file), 'w') as handle:
        json.dump({'python': sys.executable, 'module': 'http.server',
                   'args': [port, '--bind', '127.0.0.1', '--directory', str(docroot)], 'environment': {}}, handle)
    return 'http://127.0.0.1:%d' % port
