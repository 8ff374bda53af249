# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP to a server or router: one bounded exchange, whatever the other side answers.

Base layer, standard library only: the host-side guard probes /health and the router without Ansible.

A router or server may be hostile or broken, and the guard's watcher and the modules must still finish
in time with bounded memory. http.client cannot promise that: its timeout is per socket operation (a peer
sending one byte every 0.5 s never trips it), its header and body reads loop until they have what they
want, and its body reads have no cap. So this file speaks HTTP/1.1 over the socket itself:

- one deadline for the whole exchange (connect, TLS handshake, send, status line, headers, body), enforced
  by setting the socket's timeout to the time left before every read, each read at most READ_CHUNK bytes;
- caps on every line of the head, on the head as a whole, on a body (MAX_CONTROL_BODY unless the caller
  names another) and, for event streams, on one line of the body;
- every failure an HttpError (an OSError: timed out, over a cap, not HTTP, refused, bad certificate), and
  parse_json's JsonError (a ValueError) for a body that is not JSON or nested too deeply to parse safely.

    fetch(method, url, timeout, ...)        -> (status, body bytes), or raises HttpError
    http_request(method, url, timeout, ...) -> (status, body bytes), (NO_ANSWER, why) on any HttpError
    open_response(method, url, timeout, ...) -> Response: .status, .headers, .readline(cap), .read(cap)
    parse_json(body, max_depth)             -> the document, or raises JsonError
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import selectors
import socket
import ssl
import time

try:  # Python 3
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 targets are not supported
    urlsplit = None

# What http_request answers when nothing usable answered (refused, timed out, over a cap, not HTTP, a bad URL).
NO_ANSWER = -1

# A control answer (GET /workers, /server_info, /v1/loads, /health, a one-token /generate) is a few KB; a gateway
# listing of a thousand workers is about 0.5 MiB.
MAX_CONTROL_BODY = 1024 * 1024
# One line of the status line or a header; http.client allows 64 KiB, real servers send well under 1 KiB.
MAX_HEAD_LINE = 16 * 1024
# The whole head (every interim 1xx head too) and its number of header lines.
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
# The most bytes one read takes off the socket: the unit of memory a trickle or a flood can cost before a cap
# or the deadline is checked again.
READ_CHUNK = 64 * 1024
# JSON deeper than this is refused before parsing: json.loads recurses once per level and raises
# RecursionError near 1000 (a thread may have less stack), and no control answer nests beyond about 5.
MAX_JSON_DEPTH = 64


class HttpError(OSError):
    """One exchange failed: refused, reset, a bad certificate, not HTTP, or one of the subclasses below.

    An OSError, so code that already treats a failed socket as a failed step treats this one the same.
    """


class HttpTimeout(HttpError):
    """The whole exchange did not finish within its timeout (however the peer paced its bytes)."""


class HttpTooLarge(HttpError):
    """A line of the head, the head, a body or a line of a body went over its cap; reading stopped there."""


class HttpProtocolError(HttpError):
    """The peer's bytes are not an HTTP/1.x answer (bad status line, header, chunk size, a body cut short)."""


class JsonError(ValueError):
    """A body that is not JSON (or not UTF-8), or JSON nested deeper than parse_json allows."""


# A JSON string, so that brackets inside strings are not counted as nesting (unrolled: linear time).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_BRACKET = re.compile(r'[\[\]{}]')
_UNSENDABLE_TARGET = re.compile(r'[\x00-\x20\x7f]')
_UNSENDABLE_NAME = re.compile(r'[\x00-\x20\x7f:]')
_UNSENDABLE_VALUE = re.compile(r'[\x00-\x08\x0a-\x1f\x7f]')


def json_depth_exceeds(text, max_depth):
    """Whether text's arrays and objects nest deeper than max_depth (stops counting as soon as they do)."""
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if match.group() in '[{':
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def parse_json(body, max_depth=MAX_JSON_DEPTH):
    """The JSON document in body (bytes or str); JsonError when it is not JSON or nests deeper than max_depth.

    The depth is checked before json.loads runs: a hostile answer of 200,000 '[' would otherwise raise
    RecursionError (not a ValueError) out of every caller that expects a bad body to be a ValueError.
    """
    try:
        text = body.decode('utf-8') if isinstance(body, bytes) else body
    except UnicodeDecodeError as exc:
        raise JsonError('not UTF-8 (%s)' % exc)
    if json_depth_exceeds(text, max_depth):
        raise JsonError('JSON nested deeper than %d levels' % max_depth)
    try:
        return json.loads(text)
    except RecursionError:
        raise JsonError('JSON nested too deeply to parse')
    except ValueError as exc:
        raise JsonError('not JSON (%s)' % exc)


def bearer(api_key):
    """The request headers that carry an API key (none without one), as SGLang and its router read them."""
    return {'Authorization': 'Bearer %s' % api_key} if api_key else {}


def _seconds(value):
    return ('%.3f' % value).rstrip('0').rstrip('.')


def _split_line(buffer, cap, more):
    """Take the first line (with its b'\\n') off buffer, a bytearray that more() extends by one read at a time
    (False at the end of the stream: the rest is then the line, maybe b''); None once it passes cap bytes,
    so a line without end costs cap bytes and a read, never more."""
    searched = 0
    while True:
        end = buffer.find(b'\n', searched)
        if end >= 0:
            if end + 1 > cap:
                return None
            line = bytes(buffer[:end + 1])
            del buffer[:end + 1]
            return line
        if len(buffer) > cap:
            return None
        searched = len(buffer)
        if not more():
            line = bytes(buffer)
            del buffer[:]
            return line


class _Exchange(object):
    """The socket of one exchange and its deadline: every wait on the peer ends by the deadline."""

    def __init__(self, timeout, clock):
        self.timeout = timeout
        self.clock = clock
        self.deadline = clock() + timeout
        self.phase = 'connecting'
        self.sock = None
        self.buffer = bytearray()
        self.eof = False

    def timed_out(self):
        return HttpTimeout('no complete answer within %ss (timed out %s)' % (_seconds(self.timeout), self.phase))

    def left(self):
        """Seconds left; HttpTimeout when none."""
        left = self.deadline - self.clock()
        if left <= 0:
            raise self.timed_out()
        return left

    def connect(self, parts, ssl_context):
        try:
            port = parts.port or (443 if parts.scheme == 'https' else 80)
        except ValueError as exc:  # a port out of range or not a number
            raise HttpError('a bad URL: %s' % exc)
        if not parts.hostname:
            raise HttpError('a URL without a host')
        try:
            self.sock = socket.create_connection((parts.hostname, port), timeout=self.left())
            if parts.scheme == 'https':
                self.phase = 'in the TLS handshake'
                context = ssl_context or ssl.create_default_context()
                self.sock = context.wrap_socket(self.sock, server_hostname=parts.hostname,
                                                do_handshake_on_connect=False)
                self._handshake()
        except socket.timeout:
            self.close()
            raise self.timed_out()
        except (OSError, ValueError) as exc:
            self.close()
            if isinstance(exc, HttpError):
                raise
            raise HttpError('%s %s:%s: %s' % ('TLS with' if self.phase != 'connecting' else 'connecting to',
                                              parts.hostname, port, exc))

    def _handshake(self):
        # Non-blocking, each wait bounded by the time left: a blocking handshake's timeout is per read too.
        self.sock.setblocking(False)
        with selectors.DefaultSelector() as selector:
            while True:
                try:
                    self.sock.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    events = selectors.EVENT_READ
                except ssl.SSLWantWriteError:
                    events = selectors.EVENT_WRITE
                selector.register(self.sock, events)
                ready = selector.select(self.left())
                selector.unregister(self.sock)
                if not ready:
                    raise self.timed_out()
        self.sock.setblocking(True)

    def _on_socket(self, action, failure):
        """action() with the socket's timeout set to the time left: HttpTimeout when it runs out, else an
        HttpError saying `failure` and why."""
        try:
            self.sock.settimeout(self.left())
            return action()
        except HttpError:
            raise
        except socket.timeout:
            raise self.timed_out()
        except OSError as exc:
            raise HttpError('%s: %s' % (failure, exc))

    def send(self, data):
        self.phase = 'sending the request'
        # Since Python 3.5 a sendall's timeout bounds the whole call, not each write.
        self._on_socket(lambda: self.sock.sendall(data), 'sending the request failed')

    def fill(self):
        """One read of at most READ_CHUNK bytes into the buffer; False at the end of the stream."""
        if self.eof:
            return False
        data = self._on_socket(lambda: self.sock.recv(READ_CHUNK), 'reading the answer failed (%s)' % self.phase)
        if not data:
            self.eof = True
            return False
        self.buffer.extend(data)
        return True

    def take(self, limit):
        """Up to limit bytes of the stream (at least one unless it ended): from the buffer, else one read."""
        if not self.buffer and not self.fill():
            return b''
        piece = bytes(self.buffer[:limit])
        del self.buffer[:limit]
        return piece

    def head_line(self, cap, what):
        """One line of the head (CRLF or LF ended, without it); HttpTooLarge past cap bytes."""
        line = _split_line(self.buffer, cap, self.fill)
        if line is None:
            raise HttpTooLarge('%s is longer than %d bytes' % (what, cap))
        if not line.endswith(b'\n'):
            raise HttpProtocolError('the answer ended %s' % self.phase)
        return line.rstrip(b'\r\n')

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None


def _request_bytes(method, parts, body, headers):
    target = (parts.path or '/') + ('?' + parts.query if parts.query else '')
    host = parts.hostname
    if ':' in host:
        host = '[%s]' % host
    if parts.port:
        host = '%s:%d' % (host, parts.port)
    # A line break in a value (an API key pasted with its newline) would split the request: refuse it.
    if _UNSENDABLE_TARGET.search(target) or any(_UNSENDABLE_NAME.search(str(name)) or not str(name)
                                                or _UNSENDABLE_VALUE.search(str(value))
                                                for name, value in headers.items()):
        raise HttpError('refused to send a request line or header with a control character in it')
    lines = ['%s %s HTTP/1.1' % (method, target), 'Host: %s' % host]
    names = set()
    for name, value in headers.items():
        lines.append('%s: %s' % (name, value))
        names.add(str(name).lower())
    if body is not None or method in ('POST', 'PUT', 'PATCH'):
        lines.append('Content-Length: %d' % len(body or b''))
    if 'accept-encoding' not in names:
        lines.append('Accept-Encoding: identity')
    # One exchange a connection: no keep-alive to reason about, and a close-delimited body can end.
    lines.append('Connection: close')
    try:
        head = ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1')
    except UnicodeEncodeError:
        raise HttpError('refused to send a request line or header that is not Latin-1 text')
    return head + (body or b'')


class Response(object):
    """The answer to one request: status, reason, headers (lower-case names), and its body read within caps.

    Reads go on within the exchange's deadline; close() (or a with block) ends the connection.
    """

    def __init__(self, exchange, method):
        self._exchange = exchange
        self._lines = bytearray()
        self._head_bytes = 0
        exchange.phase = 'reading the status line'
        while True:
            self.status, self.reason = self._status_line()
            self.headers = self._headers()
            # Interim answers (100 Continue, 103 Early Hints) are skipped; their heads count toward MAX_HEAD.
            if not 100 <= self.status < 200 or self.status == 101:
                break
            exchange.phase = 'reading the status line'
        exchange.phase = 'reading the body'
        self._chunk_left = 0
        self._done = False
        self._length = None
        self._chunked = False
        if method == 'HEAD' or self.status in (101, 204, 304):
            self._done = True
        elif 'chunked' in self.headers.get('transfer-encoding', '').lower():
            self._chunked = True
            self._first_chunk = True
        elif 'content-length' in self.headers:
            lengths = set(value.strip() for value in self.headers['content-length'].split(','))
            if len(lengths) != 1 or not next(iter(lengths)).isdigit():
                raise HttpProtocolError('a bad Content-Length: %r' % self.headers['content-length'][:100])
            self._length = int(lengths.pop())

    def _head_line(self, what):
        exchange = self._exchange
        line = exchange.head_line(min(MAX_HEAD_LINE, MAX_HEAD - self._head_bytes + 2), what)
        self._head_bytes += len(line) + 2
        return line

    def _status_line(self):
        line = self._head_line('the status line')
        fields = line.split(None, 2)
        if len(fields) < 2 or not fields[0].startswith(b'HTTP/1.') or not (fields[1].isdigit() and len(fields[1]) == 3):
            raise HttpProtocolError('not an HTTP/1.x status line: %r' % line[:100])
        status = int(fields[1])
        if status < 100:
            raise HttpProtocolError('not an HTTP status: %r' % line[:100])
        return status, fields[2].decode('latin-1') if len(fields) > 2 else ''

    def _headers(self):
        self._exchange.phase = 'reading the headers'
        headers, last = {}, None
        count = 0
        while True:
            line = self._head_line('a header line (or the head past %d bytes)' % MAX_HEAD)
            if not line:
                return headers
            count += 1
            if count > MAX_HEADERS:
                raise HttpTooLarge('more than %d header lines' % MAX_HEADERS)
            if line[:1] in (b' ', b'\t') and last is not None:  # an obsolete folded continuation
                headers[last] += ' ' + line.strip().decode('latin-1')
                continue
            name, colon, value = line.partition(b':')
            if not colon or not name.strip() or name != name.strip():
                raise HttpProtocolError('not a header line: %r' % line[:100])
            last = name.decode('latin-1').lower()
            value = value.strip().decode('latin-1')
            headers[last] = headers[last] + ', ' + value if last in headers else value

    def _piece(self, limit):
        """Up to limit bytes of the body as framed (length, chunked or until close); b'' at its end."""
        exchange = self._exchange
        if self._done:
            return b''
        if self._length is not None:
            if self._length == 0:
                self._done = True
                return b''
            piece = exchange.take(min(limit, self._length))
            if not piece:
                raise HttpProtocolError('the answer ended %d bytes short of its Content-Length' % self._length)
            self._length -= len(piece)
            return piece
        if not self._chunked:
            piece = exchange.take(limit)
            self._done = not piece
            return piece
        if self._chunk_left == 0:
            if not self._first_chunk:
                try:
                    after = exchange.head_line(2, 'the end of a chunk')
                except HttpTooLarge:
                    after = True
                if after:
                    raise HttpProtocolError('a chunk longer than its size line said')
            self._first_chunk = False
            size_line = exchange.head_line(MAX_HEAD_LINE, 'a chunk size line')
            size = size_line.split(b';', 1)[0].strip()
            try:
                self._chunk_left = int(size, 16)
            except ValueError:
                raise HttpProtocolError('a bad chunk size line: %r' % size_line[:100])
            if self._chunk_left < 0:
                raise HttpProtocolError('a bad chunk size line: %r' % size_line[:100])
            if self._chunk_left == 0:
                self._head_bytes = 0
                while self._head_line('a trailer line'):
                    pass
                self._done = True
                return b''
        piece = exchange.take(min(limit, self._chunk_left))
        if not piece:
            raise HttpProtocolError('the answer ended inside a chunk')
        self._chunk_left -= len(piece)
        return piece

    def read(self, max_bytes=MAX_CONTROL_BODY):
        """The whole body (what readline has not taken); HttpTooLarge as soon as it passes max_bytes."""
        if self._length is not None and self._length + len(self._lines) > max_bytes:
            raise HttpTooLarge('the answer is %d bytes (Content-Length), over the %d-byte cap'
                               % (self._length + len(self._lines), max_bytes))
        body = self._lines
        self._lines = bytearray()
        while True:
            piece = self._piece(READ_CHUNK)
            if not piece:
                return bytes(body)
            body.extend(piece)
            if len(body) > max_bytes:
                raise HttpTooLarge('the answer is longer than the %d-byte cap' % max_bytes)

    def readline(self, max_line):
        """The body's next line with its b'\\n' (the last one may lack it); b'' at the end of the body.

        HttpTooLarge when a line passes max_line bytes; HttpTimeout once the deadline has passed, even
        while the peer keeps sending (an endless stream ends with the exchange).
        """
        self._exchange.left()

        def more():
            piece = self._piece(READ_CHUNK)
            self._lines.extend(piece)
            return bool(piece)
        line = _split_line(self._lines, max_line, more)
        if line is None:
            raise HttpTooLarge('a line of the answer is longer than the %d-byte cap' % max_line)
        return line

    def close(self):
        self._exchange.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_response(method, url, timeout, body=None, headers=None, ssl_context=None, clock=time.monotonic):
    """Send one request and read the answer's head, all within timeout seconds (the body's reads too).

    http.client is not used: see the file's docstring. The request goes straight to the URL's address,
    never through an http_proxy the environment may name. A dict body is sent as JSON. An https URL is
    spoken over TLS with its certificate verified against the system's trust store (ssl_context overrides
    it); any other scheme than http or https is refused, never spoken as plain HTTP.
    Raises HttpError (HttpTimeout, HttpTooLarge, HttpProtocolError); the caller closes the Response.
    """
    parts = urlsplit(url)
    if parts.scheme not in ('http', 'https'):
        raise HttpError('only http and https URLs are spoken (got %r)' % (parts.scheme or 'no scheme'))
    headers = dict(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body).encode('utf-8')
        headers.setdefault('Content-Type', 'application/json')
    exchange = _Exchange(float(timeout), clock)
    try:
        request = _request_bytes(method, parts, body, headers)
        exchange.connect(parts, ssl_context)
        exchange.send(request)
        return Response(exchange, method)
    except BaseException:
        exchange.close()
        raise


def fetch(method, url, timeout, body=None, headers=None, ssl_context=None, max_body=MAX_CONTROL_BODY):
    """(status, body bytes) of one request, all of it within timeout seconds; raises HttpError."""
    with open_response(method, url, timeout, body=body, headers=headers, ssl_context=ssl_context) as response:
        return response.status, response.read(max_body)


def http_request(method, url, timeout, body=None, headers=None, ssl_context=None, max_body=MAX_CONTROL_BODY):
    """(status, body bytes) of one request; (NO_ANSWER, why as bytes) when no usable answer came in time.

    Never raises for anything the peer does: fetch's HttpError becomes NO_ANSWER with its message.
    """
    try:
        return fetch(method, url, timeout, body=body, headers=headers, ssl_context=ssl_context, max_body=max_body)
    except HttpError as exc:
        return NO_ANSWER, str(exc).encode('utf-8', 'replace')


def http_get(url, timeout, max_body=MAX_CONTROL_BODY):
    return http_request('GET', url, timeout, max_body=max_body)
