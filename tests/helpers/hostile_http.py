"""A hostile or broken HTTP peer on 127.0.0.1: it reads each request, then answers as a script says, byte by byte.

http_responder answers well-formed HTTP; the bounded reader (_http) is about the answers a real server never
sends and a broken or hostile one may: nested brackets, a trickle of one byte every half second, an event
stream or a line without end, a body far over any cap. Each behaviour is a function (connection, stopping)
that writes what it likes until the client goes away or the test ends; the server records every request and
whether the client closed the connection while it was still writing (the read stopped at a cap or deadline).

    def test_x(hostile_http):
        server = hostile_http(trickle())
        ... point the code under test at server.url ...
        assert server.client_went_away.wait(10)
"""
import json
import socket
import threading

import pytest

HEAD = b'HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%s\r\n'


def head(content_type=b'application/json', extra=b''):
    return HEAD % (content_type, extra)


class ClientGone(Exception):
    """The client closed the connection (or the test ended) while the server was still writing."""


def _send(connection, stopping, data):
    if stopping.is_set():
        raise ClientGone()
    try:
        connection.sendall(data)
    except OSError:
        raise ClientGone()


def nested_brackets(depth=200000):
    """200 and a JSON body of `depth` '[' (with its Content-Length): json.loads raises RecursionError on it."""
    def behave(connection, stopping):
        body = b'[' * depth
        _send(connection, stopping, head(extra=b'Content-Length: %d\r\n' % len(body)) + body)
    return behave


def trickle(prefix=b'', interval=0.5):
    """`prefix` at once, then one byte every `interval` seconds without end (inside the head by default)."""
    def behave(connection, stopping):
        _send(connection, stopping, prefix)
        filler = b'HTTP/1.1 200 OK\r\nX-Slow: ' if not prefix else b'a'
        index = 0
        while not stopping.wait(interval):
            _send(connection, stopping, filler[index:index + 1] or b'a')
            index += 1
    return behave


def trickle_body(interval=0.5):
    """A whole head announcing a 1 MB JSON body, then one byte of it every `interval` seconds."""
    return trickle(head(extra=b'Content-Length: 1000000\r\n') + b'{"workers": [', interval)


def endless_events(interval=0.01):
    """An event stream (no length: it ends when the connection does) of one event every `interval` s, never
    finishing: each carries the same completion_tokens and no finish reason."""
    event = b'data: %s\n\n' % json.dumps({'text': 'a', 'meta_info': {'completion_tokens': 1,
                                                                    'finish_reason': None}}).encode()

    def behave(connection, stopping):
        _send(connection, stopping, head(b'text/event-stream'))
        while not stopping.wait(interval):
            _send(connection, stopping, event)
    return behave


def endless_line(content_type=b'text/event-stream', start=b'data: '):
    """A head, `start`, then 64 KiB of 'a' after 64 KiB, as fast as the client reads, never a line break."""
    def behave(connection, stopping):
        _send(connection, stopping, head(content_type) + start)
        block = b'a' * 65536
        while True:
            _send(connection, stopping, block)
    return behave


def huge_length(length=10 * 1024 ** 3):
    """A head announcing a body of `length` bytes (10 GiB), then the body as fast as the client reads."""
    def behave(connection, stopping):
        _send(connection, stopping, head(extra=b'Content-Length: %d\r\n' % length))
        block = b' ' * 65536
        while True:
            _send(connection, stopping, block)
    return behave


def raw(data):
    """Exactly `data`, then the connection closed: a status line or framing of the test's choosing."""
    def behave(connection, stopping):
        _send(connection, stopping, data)
    return behave


def by_request(choices, otherwise):
    """The behaviour of the first choice whose 'METHOD /path' prefix the request line starts with, else
    `otherwise`: a router that lists its workers well and trickles its answer to DELETE, say."""
    def choose(request):
        return next((behave for prefix, behave in choices if request.startswith(prefix)), otherwise)
    choose.per_request = True
    return choose


def listing(document):
    """A well-formed 200 JSON answer with its Content-Length, then the connection closed."""
    body = json.dumps(document).encode()
    return raw(head(extra=b'Content-Length: %d\r\n' % len(body)) + body)


class HostileServer(object):
    """A threaded TCP listener on a free 127.0.0.1 port answering every request with behave()."""

    def __init__(self, behave):
        self.behave = behave
        self.requests = []
        self.client_went_away = threading.Event()
        self._stopping = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(('127.0.0.1', 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self._threads = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self._listener.getsockname()[1]

    def _accept(self):
        while not self._stopping.is_set():
            try:
                connection, dummy = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _read_request(self, connection):
        data = b''
        while b'\r\n\r\n' not in data and len(data) < 65536:
            piece = connection.recv(4096)
            if not piece:
                return None
            data += piece
        head_bytes, dummy, body = data.partition(b'\r\n\r\n')
        lines = head_bytes.decode('latin-1').split('\r\n')
        headers = dict(line.split(': ', 1) for line in lines[1:] if ': ' in line)
        length = int(headers.get('Content-Length') or 0)
        while len(body) < length:
            piece = connection.recv(4096)
            if not piece:
                break
            body += piece
        return '%s %s' % tuple(lines[0].split(' ')[:2])

    def _serve(self, connection):
        # A bounded wait for each write: a client that stops reading is noticed, and so is the test's end.
        connection.settimeout(5)
        try:
            request = self._read_request(connection)
            if request is None:
                return
            self.requests.append(request)
            behave = self.behave(request) if getattr(self.behave, 'per_request', False) else self.behave
            behave(connection, self._stopping)
        except ClientGone:
            if not self._stopping.is_set():
                self.client_went_away.set()
        except OSError:
            pass
        finally:
            connection.close()

    def stop(self):
        self._stopping.set()
        self._listener.close()
        self._accepting.join()
        for thread in self._threads:
            thread.join(10)


@pytest.fixture
def hostile_http():
    """Start HostileServers with hostile_http(behaviour); each is stopped when the test ends."""
    started = []

    def start(behave):
        server = HostileServer(behave)
        started.append(server)
        return server
    yield start
    for server in started:
        server.stop()
