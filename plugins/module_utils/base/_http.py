# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP to a server or router: one bounded exchange, whatever the other side answers.

Base layer, standard library only: the host-side guard probes /health and the router without Ansible.

A router or server may be hostile or broken, and the guard's watcher and the modules must still finish
in time with bounded memory. http.client speaks HTTP/1.1 (status line, headers, chunked framing, a 100
Continue before the answer, TLS) and bounds a head line (64 KiB) and the number of headers (100). What it lacks is added here:

- one deadline for the whole exchange (name resolution, connect, TLS handshake, send, head, body): its timeout
  is per socket operation, so a peer sending one byte every 0.5 s would never trip it. http.client gets a socket
  that sets its timeout to the time left before every send and read; a name is resolved within the time left,
  and each of its addresses is tried with what is left after the ones before it;
- caps on a body (MAX_CONTROL_BODY unless the caller names another) and, for event streams, on one line;
- every failure an HttpError (an OSError: timed out, over a cap, not HTTP, refused, bad certificate), and
  parse_json's JsonError (a ValueError) for a body that is not JSON or nested too deeply to parse safely.

    fetch(method, url, timeout, ...)        -> (status, body bytes), or raises HttpError
    http_request(method, url, timeout, ...) -> (status, body bytes), (NO_ANSWER, why) on any HttpError
    open_response(method, url, timeout, ...) -> Response: .status, .headers, .readline(cap), .read(cap)
    parse_json(body, max_depth)             -> the document, or raises JsonError
    endpoint(url)                           -> (scheme, host, port), or raises HttpError
    resolve(host, port, seconds)            -> getaddrinfo's list, None past seconds, or raises its error
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import re
import socket
import ssl
import threading
import time

from urllib.parse import urlsplit
from typing import Any, Callable, Iterator

# What http_request answers when nothing usable answered (refused, timed out, over a cap, not HTTP, a bad URL).
NO_ANSWER = -1

# A control answer (GET /workers, /server_info, /v1/loads, /health, a one-token /generate) is a few KB; a gateway
# listing of a thousand workers is about 0.5 MiB.
MAX_CONTROL_BODY = 1024 * 1024
# http.client's own caps on the head, which it enforces: one line of it, and its number of header lines.
MAX_HEAD_LINE = 65536
MAX_HEADERS = 100
# The most bytes one read of a body asks for: the unit of memory a flood can cost before a cap is checked.
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


def json_depth_exceeds(text: str, max_depth: int) -> bool:
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


def parse_json(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
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


def bearer(api_key: str | None) -> dict[str, str]:
    """The request headers that carry an API key (none without one), as SGLang and its router read them."""
    return {'Authorization': 'Bearer %s' % api_key} if api_key else {}


def _refuse_unsendable(target: str, headers: dict[str, str]) -> None:
    """HttpError for a request line or header that cannot go out as written: a line break in a value (an API
    key pasted with its newline) would split the request. http.client lets more through: a folded line
    break, a name with a space in it, a control character in the target before Python 3.7.4."""
    try:
        target.encode('ascii')
        for name, value in headers.items():
            ('%s%s' % (name, value)).encode('latin-1')
    except UnicodeEncodeError:
        raise HttpError('refused to send a request line or header that is not Latin-1 text')
    if _UNSENDABLE_TARGET.search(target) or any(not str(name) or _UNSENDABLE_NAME.search(str(name))
                                                or _UNSENDABLE_VALUE.search(str(value)) for name, value in headers.items()):
        raise HttpError('refused to send a request line or header with a control character in it')


DEFAULT_PORTS = {'http': 80, 'https': 443}


def endpoint(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http or https URL, the scheme's own port where it names none; HttpError for
    any other URL (another scheme, no host, a bad port or bracket)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # an unbalanced IPv6 bracket, a port out of range or not a number
        raise HttpError('a bad URL: %s' % exc)
    if parts.scheme not in DEFAULT_PORTS:
        raise HttpError('only http and https URLs are spoken (got %r)' % (parts.scheme or 'no scheme'))
    if not parts.hostname:
        raise HttpError('a URL without a host')
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def resolve(host: str, port: int,
            seconds: float) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]] | None:
    """getaddrinfo's (family, type, proto, canonname, sockaddr) list for host (stream sockets), or None when the
    lookup takes longer than seconds; the lookup's own exception (socket.gaierror: no such name) when it fails.

    An address (the usual case: the role asks servers at their inventory address) needs no resolver. A name
    is resolved in a daemon thread joined with the time given: getaddrinfo takes no timeout, and a dead DNS
    server holds it for the resolver's own timeouts and attempts (resolv.conf: 5 s, twice, per server). A
    lookup that outlives it is left to end on its own; its answer is dropped.
    """
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not an address
    answer = []

    def lookup() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except Exception as exc:  # handed to the caller's thread, raised there
            answer.append(exc)
    resolver = threading.Thread(target=lookup, name='resolve %s' % host, daemon=True)
    resolver.start()
    resolver.join(max(0.0, seconds))
    if not answer:
        return None
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]


class _Exchange:
    """One exchange's deadline, and its socket as http.client uses one (sendall, makefile, close): each send
    and read first sets the socket's timeout to the time left, so every wait on the peer ends by the deadline."""

    def __init__(self, timeout: float, clock: Callable) -> None:
        self.timeout = timeout
        self.clock = clock
        self.deadline = clock() + timeout
        self.phase = 'sending the request'
        self.sock = None

    def timed_out(self) -> HttpTimeout:
        return HttpTimeout('no complete answer within %ss (timed out %s)'
                           % (('%.3f' % self.timeout).rstrip('0').rstrip('.'), self.phase))

    def left(self) -> float:
        """Seconds left; HttpTimeout when none."""
        left = self.deadline - self.clock()
        if left <= 0:
            raise self.timed_out()
        return left

    def resolve(self, host: str,
                port: int) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int]]]:
        """getaddrinfo's list for host (resolve()), within the time left."""
        self.phase = 'resolving %s' % host
        try:
            found = resolve(host, port, self.left())
        except Exception as exc:  # whatever getaddrinfo raised: an HttpError, as every failure of an exchange
            raise HttpError('%s: %s' % (self.phase, exc))
        if found is None:
            raise self.timed_out()
        return found

    def connect(self, host: str, port: int, context: None) -> _Exchange:
        """Resolve host, then connect to its addresses in turn, all within the one deadline (socket.create_connection
        would resolve without any bound, then give each address the whole timeout again)."""
        failure = None
        for family, kind, proto, dummy, address in self.resolve(host, port):
            self.phase = 'connecting to %s:%s' % (host, port)
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.left())
                sock.connect(address)
            except HttpError:
                sock.close()
                raise
            except socket.timeout:
                # The time left is spent on this address: no later one may have more.
                sock.close()
                raise self.timed_out()
            except OSError as exc:  # refused, unreachable: the next address may answer
                sock.close()
                failure = exc
                continue
            self.sock = sock
            break
        else:
            raise failure or HttpError('%s has no address' % host)
        if context is not None:
            self.phase = 'in the TLS handshake with %s:%s' % (host, port)
            # CPython bounds a whole handshake, every wait in it, by the socket's timeout.
            self.sock.settimeout(self.left())
            self.sock = context.wrap_socket(self.sock, server_hostname=host)
        return self

    def _bounded(self, call: Callable, data: memoryview | bytes) -> int | None:
        self.sock.settimeout(self.left())
        try:
            return call(data)
        except socket.timeout:
            raise self.timed_out()

    def sendall(self, data: bytes) -> None:
        self.phase = 'sending the request'
        self._bounded(self.sock.sendall, data)  # since Python 3.5 its timeout bounds the whole call
        self.phase = 'reading the status line'

    def recv_into(self, buffer: memoryview) -> int:
        count = self._bounded(self.sock.recv_into, buffer)
        if self.phase == 'reading the status line' and b'\n' in bytes(buffer[:count]):
            self.phase = 'reading the headers'
        return count

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_Reader(self))

    def close(self) -> None:
        """Nothing: http.client closes its connection once the head says the peer will close, then reads the
        body through makefile's reader (a socket.socket defers that close too); Response.close calls end()."""

    def end(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    @contextlib.contextmanager
    def failures(self) -> Iterator[None]:
        """Whatever the socket, ssl or http.client raise, as an HttpError that names the phase."""
        try:
            yield
        except HttpError:
            raise
        except socket.timeout:  # in connect or the TLS handshake, each bounded by the time left
            raise self.timed_out()
        except http.client.RemoteDisconnected:
            raise HttpProtocolError('the answer ended %s' % self.phase)
        except (http.client.BadStatusLine, http.client.UnknownProtocol) as exc:
            raise HttpProtocolError('not an HTTP/1.x status line: %r' % exc.args[0][:100])
        except http.client.IncompleteRead:  # raised here only by a chunked body: a length is checked in Response
            raise HttpProtocolError('the chunked framing is broken or the answer ended inside a chunk')
        except http.client.HTTPException as exc:
            # LineTooLong, and the 100-header cap, which http.client raises without a class of its own.
            over = isinstance(exc, http.client.LineTooLong) or 'more than' in str(exc)
            raise (HttpTooLarge if over else HttpProtocolError)(str(exc) or type(exc).__name__)
        except (OSError, ValueError) as exc:  # refused, reset, a bad certificate (a ValueError before 3.7)
            raise HttpError('%s: %s' % (self.phase, exc))


class _Reader(io.RawIOBase):
    """What http.client reads the answer through: each read one recv bounded by the deadline."""

    def __init__(self, exchange: _Exchange) -> None:
        io.RawIOBase.__init__(self)
        self.readinto = exchange.recv_into

    def readable(self) -> bool:
        return True


class Response:
    """The answer to one request: status, reason, headers (lower-case names), and its body read within caps.

    Reads go on within the exchange's deadline; close() (or a with block) ends the connection.
    """

    def __init__(self, response: http.client.HTTPResponse, exchange: _Exchange) -> None:
        self._response = response
        self._exchange = exchange
        self.status, self.reason = response.status, response.reason
        self.headers = {name.lower(): response.getheader(name) for name in response.msg.keys()}
        # email's parser, under http.client, stops at a line that is not a header and keeps the rest as a body.
        if response.msg.defects:
            raise HttpProtocolError('not a header line: %r' % str(response.msg.get_payload())[:100])
        # http.client takes the first of several lengths, and reads to the close past one it cannot parse.
        declared = response.getheader('content-length')
        if declared is not None and not response.chunked:
            lengths = {value.strip() for value in declared.split(',')}
            if len(lengths) != 1 or not lengths.pop().isdigit():
                raise HttpProtocolError('a bad Content-Length: %r' % declared[:100])
        exchange.phase = 'reading the body'

    def _ended(self) -> None:
        # http.client ends a body cut short of its Content-Length quietly, with the rest still counted here.
        if self._response.length:
            raise HttpProtocolError('the answer ended %d bytes short of its Content-Length' % self._response.length)

    def read(self, max_bytes: int = MAX_CONTROL_BODY) -> bytes:
        """The whole body (what readline has not taken); HttpTooLarge as soon as it passes max_bytes."""
        if (self._response.length or 0) > max_bytes:
            raise HttpTooLarge('the answer is %d bytes (Content-Length), over the %d-byte cap'
                               % (self._response.length, max_bytes))
        body = bytearray()
        with self._exchange.failures():
            for piece in iter(lambda: self._response.read(READ_CHUNK), b''):
                body.extend(piece)
                if len(body) > max_bytes:
                    raise HttpTooLarge('the answer is longer than the %d-byte cap' % max_bytes)
        self._ended()
        return bytes(body)

    def readline(self, max_line: int) -> bytes:
        """The body's next line with its b'\\n' (the last one may lack it); b'' at the end of the body.

        HttpTooLarge when a line passes max_line bytes; HttpTimeout once the deadline has passed, even
        while the peer keeps sending (an endless stream ends with the exchange).
        """
        with self._exchange.failures():
            self._exchange.left()
            line = self._response.readline(max_line + 1)
        if len(line) > max_line:
            raise HttpTooLarge('a line of the answer is longer than the %d-byte cap' % max_line)
        if not line:
            self._ended()
        return line

    def close(self) -> None:
        self._response.close()
        self._exchange.end()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> bool:
        self.close()
        return False


def open_response(method: str, url: str, timeout: float, body: dict[str, Any] | None = None,
                  headers: dict[str, str] | None = None, ssl_context: ssl.SSLContext | None = None,
                  clock: Callable = time.monotonic) -> Response:
    """Send one request and read the answer's head, all within timeout seconds (the body's reads too).

    The request goes straight to the URL's address, never through an http_proxy the environment may name,
    with Connection: close (one exchange a connection). A dict body is sent as JSON. An https URL is spoken
    over TLS with its certificate verified against the system's trust store (ssl_context overrides it); any
    other scheme than http or https is refused, never spoken as plain HTTP.
    Raises HttpError (HttpTimeout, HttpTooLarge, HttpProtocolError); the caller closes the Response.
    """
    scheme, host, port = endpoint(url)
    parts = urlsplit(url)
    headers = dict(headers or {}, Connection='close')
    if isinstance(body, dict):
        body = json.dumps(body).encode('utf-8')
        headers.setdefault('Content-Type', 'application/json')
    target = (parts.path or '/') + ('?' + parts.query if parts.query else '')
    _refuse_unsendable(target, headers)
    exchange = _Exchange(float(timeout), clock)
    try:
        with exchange.failures():
            context = (ssl_context or ssl.create_default_context()) if scheme == 'https' else None
            connection = http.client.HTTPConnection(host, port)
            # The Host header names the port unless it is the scheme's.
            connection.default_port = DEFAULT_PORTS[scheme]
            connection.sock = exchange.connect(host, port, context)
            connection.request(method, target, body, headers)
            return Response(connection.getresponse(), exchange)
    except BaseException:
        exchange.end()
        raise


def fetch(method: str, url: str, timeout: float, body: dict[str, Any] | None = None,
          headers: dict[str, str] | None = None, ssl_context: ssl.SSLContext | None = None,
          max_body: int = MAX_CONTROL_BODY) -> tuple[int, bytes]:
    """(status, body bytes) of one request, all of it within timeout seconds; raises HttpError."""
    with open_response(method, url, timeout, body=body, headers=headers, ssl_context=ssl_context) as response:
        return response.status, response.read(max_body)


def http_request(method: str, url: str, timeout: float, body: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None, ssl_context: ssl.SSLContext | None = None,
                 max_body: int = MAX_CONTROL_BODY) -> tuple[int, bytes]:
    """(status, body bytes) of one request; (NO_ANSWER, why as bytes) when no usable answer came in time.

    Never raises for anything the peer does: fetch's HttpError becomes NO_ANSWER with its message.
    """
    try:
        return fetch(method, url, timeout, body=body, headers=headers, ssl_context=ssl_context, max_body=max_body)
    except HttpError as exc:
        return NO_ANSWER, str(exc).encode('utf-8', 'replace')


def http_get(url: str, timeout: float, max_body: int = MAX_CONTROL_BODY) -> tuple[int, bytes]:
    return http_request('GET', url, timeout, max_body=max_body)
