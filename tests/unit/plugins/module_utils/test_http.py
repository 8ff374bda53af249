"""_http speaks the scheme its URL names: https over TLS with the certificate verified, http in plain text,
anything else refused as no answer. Against real loopback servers (a TLS one with a certificate made here).

And it is bounded whatever the peer does (tests/helpers/hostile_http.py): one deadline for the whole exchange,
caps on the head, the body and a line, every failure an HttpError, JSON refused before it nests too deep."""
import datetime
import ipaddress
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import (
    NO_ANSWER, HttpError, HttpProtocolError, HttpTimeout, HttpTooLarge, JsonError, bearer, fetch, http_get, http_request,
    json_depth_exceeds, open_response, parse_json)
from helpers.hostile_http import (  # noqa: F401  (hostile_http: the fixture)
    endless_events, endless_line, hostile_http, huge_length, nested_brackets, raw, trickle, trickle_body)
from helpers.http_responder import http_responder  # noqa: F401  (the fixture)


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        pass


def _self_signed(folder):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, u'127.0.0.1')])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(u'127.0.0.1'))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / 'cert.pem', folder / 'key.pem'
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture
def servers(tmp_path):
    cert, key = _self_signed(tmp_path)
    plain = ThreadingHTTPServer(('127.0.0.1', 0), _Answer)
    secure = ThreadingHTTPServer(('127.0.0.1', 0), _Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    threads = [threading.Thread(target=s.serve_forever, kwargs={'poll_interval': 0.01}, daemon=True)
               for s in (plain, secure)]
    for thread in threads:
        thread.start()
    yield {'http': 'http://127.0.0.1:%d' % plain.server_port, 'https': 'https://127.0.0.1:%d' % secure.server_port,
           'cert': cert}
    for server in (plain, secure):
        server.shutdown()
        server.server_close()


def test_an_https_url_is_spoken_over_tls_with_a_trusted_certificate(servers):
    trusted = ssl.create_default_context(cafile=servers['cert'])
    assert http_request('GET', servers['https'] + '/health', 5, ssl_context=trusted) == (200, b'{"ok": true}')


def test_an_https_certificate_the_trust_store_does_not_know_is_no_answer(servers):
    status, detail = http_get(servers['https'] + '/health', 5)
    assert status == NO_ANSWER
    assert b'CERTIFICATE_VERIFY_FAILED' in detail


def test_an_http_url_is_plain_text(servers):
    assert http_get(servers['http'] + '/health', 5) == (200, b'{"ok": true}')


def test_plain_http_to_a_tls_port_is_not_an_answer(servers):
    assert http_get(servers['https'].replace('https:', 'http:') + '/health', 5)[0] == NO_ANSWER


@pytest.mark.parametrize('url', ['ftp://127.0.0.1:1/health', '127.0.0.1:30000/health', 'unix:///run/x.sock'])
def test_a_url_of_another_scheme_is_refused_as_no_answer(url):
    status, detail = http_get(url, 1)
    assert status == NO_ANSWER
    assert b'only http and https' in detail


@pytest.mark.parametrize('url', ['http://[::1:30000/health', 'http://127.0.0.1:99999/health', 'http://:30000/health'])
def test_a_malformed_url_is_no_answer_never_another_exception(url):
    status, detail = http_get(url, 1)
    assert status == NO_ANSWER
    assert b'URL' in detail


# --- a hostile or broken peer: every exchange ends in time, with bounded memory, as a clean HttpError ---

TIMEOUT = 2.0
# Generous: the behaviour under test is "ends by its timeout", not how fast; 3x leaves room for a loaded machine.
BOUND = 3 * TIMEOUT


def timed(action):
    begun = time.monotonic()
    try:
        return action(), time.monotonic() - begun
    except Exception as exc:  # the test asserts on the exception and the time it took
        return exc, time.monotonic() - begun


@pytest.mark.parametrize('behaviour, phase', [
    (trickle(), 'reading the status line'),  # a byte every 0.5 s: each read succeeds, none ends the exchange
    (trickle(b'HTTP/1.1 200 OK\r\nX-Slow: '), 'reading the headers'),
    (trickle_body(), 'reading the body'),
    (trickle(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{', 0.5), 'reading the body'),
], ids=['status-line', 'headers', 'body-with-length', 'body-until-close'])
def test_a_trickling_peer_cannot_outlast_the_whole_exchange_timeout(hostile_http, behaviour, phase):
    server = hostile_http(behaviour)
    failure, took = timed(lambda: fetch('GET', server.url + '/workers', TIMEOUT))
    assert isinstance(failure, HttpTimeout) and isinstance(failure, OSError)
    assert str(failure) == 'no complete answer within 2s (timed out %s)' % phase
    assert took < BOUND


def test_a_trickling_peer_is_no_answer_to_http_request(hostile_http):
    server = hostile_http(trickle())
    (status, detail), took = timed(lambda: http_request('GET', server.url + '/health', TIMEOUT))
    assert status == NO_ANSWER and b'no complete answer within 2s' in detail
    assert took < BOUND


def test_a_body_announced_over_the_cap_is_refused_before_it_is_read(hostile_http):
    server = hostile_http(huge_length())
    failure, dummy = timed(lambda: fetch('GET', server.url + '/server_info', TIMEOUT))
    assert isinstance(failure, HttpTooLarge)
    assert str(failure) == 'the answer is 10737418240 bytes (Content-Length), over the 1048576-byte cap'
    assert server.client_went_away.wait(BOUND)


def test_a_body_without_end_is_read_up_to_the_cap_and_no_further(hostile_http):
    server = hostile_http(endless_line(b'application/json', b'{"a": "'))
    failure, dummy = timed(lambda: fetch('GET', server.url + '/server_info', TIMEOUT, max_body=200000))
    assert isinstance(failure, HttpTooLarge) and str(failure) == 'the answer is longer than the 200000-byte cap'
    assert server.client_went_away.wait(BOUND)


def test_a_line_without_end_stops_at_the_line_cap(hostile_http):
    server = hostile_http(endless_line())
    with open_response('POST', server.url + '/generate', TIMEOUT, body=b'{}') as response:
        failure, dummy = timed(lambda: response.readline(100000))
    assert isinstance(failure, HttpTooLarge)
    assert str(failure) == 'a line of the answer is longer than the 100000-byte cap'
    assert server.client_went_away.wait(BOUND)


def test_an_endless_stream_of_lines_ends_with_the_exchange(hostile_http):
    server = hostile_http(endless_events())
    lines = []
    with open_response('POST', server.url + '/generate', 1.0, body=b'{}') as response:
        def read_all():
            while True:
                lines.append(response.readline(1000))
        failure, took = timed(read_all)
    assert isinstance(failure, HttpTimeout) and 'timed out reading the body' in str(failure)
    assert took < 3 * 1.0 and lines and all(lines)


def test_nested_brackets_are_refused_before_json_parses_them(hostile_http):
    server = hostile_http(nested_brackets())
    status, body = fetch('GET', server.url + '/workers', TIMEOUT)
    assert status == 200 and len(body) == 200000
    with pytest.raises(JsonError, match='^JSON nested deeper than 64 levels$') as raised:
        parse_json(body)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize('text, max_depth, deep', [
    ('{"a": [1, {"b": []}]}', 4, False),
    ('{"a": [1, {"b": [[]]}]}', 4, True),
    # Brackets inside strings (escaped quotes too) are text, not nesting.
    ('{"a": "[[[[[[\\"[[[[", "b": "}}}"}', 1, False),
    ('[' * 5 + ']' * 5, 5, False),
    ('[' * 6 + ']' * 6, 5, True),
])
def test_json_depth_counts_only_arrays_and_objects(text, max_depth, deep):
    assert json_depth_exceeds(text, max_depth) is deep


@pytest.mark.parametrize('body, said', [
    (b'not json', 'not JSON (Expecting value'),
    (b'\xff\xfe', 'not UTF-8'),
    (b'[' * 900 + b']' * 900, 'JSON nested deeper than 64 levels'),
])
def test_a_body_that_is_not_json_is_a_json_error(body, said):
    with pytest.raises(JsonError) as raised:
        parse_json(body)
    assert str(raised.value).startswith(said)


def test_json_within_the_depth_parses():
    assert parse_json(b'{"workers": [{"url": "http://a", "tags": ["[x]"]}]}') == {
        'workers': [{'url': 'http://a', 'tags': ['[x]']}]}


@pytest.mark.parametrize('answer, error, said', [
    (b'SSH-2.0-OpenSSH_9.2\r\n', HttpProtocolError, 'not an HTTP/1.x status line'),
    (b'HTTP/1.1 2000 OK\r\n\r\n', HttpProtocolError, 'not an HTTP/1.x status line'),
    (b'HTTP/1.1 200 OK\r\nno colon here\r\n\r\n', HttpProtocolError, 'not a header line'),
    (b'HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nabcde', HttpProtocolError, 'a bad Content-Length'),
    (b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc', HttpProtocolError, 'the answer ended 7 bytes short'),
    # http.client reads the chunks and words these; it cannot tell a bad size line from a chunk cut short.
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', HttpProtocolError, 'the chunked framing is broken'),
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n', HttpProtocolError,
     'the chunked framing is broken'),
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc', HttpProtocolError,
     'the chunked framing is broken'),
    (b'HTTP/1.1 200 OK\r\n' + b'X-A: b\r\n' * 101 + b'\r\n', HttpTooLarge, 'got more than 100 headers'),
    (b'HTTP/1.1 200 OK\r\nX-A: ' + b'b' * 70000 + b'\r\n\r\n', HttpTooLarge,
     'got more than 65536 bytes when reading header line'),
    (b'', HttpProtocolError, 'the answer ended reading the status line'),
])
def test_an_answer_that_is_not_http_is_a_protocol_error(hostile_http, answer, error, said):
    server = hostile_http(raw(answer))
    with pytest.raises(error) as raised:
        fetch('GET', server.url + '/x', TIMEOUT)
    assert str(raised.value).startswith(said)


@pytest.mark.parametrize('answer, body', [
    # uvicorn's framing: chunked, with an extension and a trailer; interim 100 Continue skipped.
    (b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'
     b'4;ext=1\r\n{"a"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n', b'{"a": 1}'),
    # No length: the body ends with the connection.
    (b'HTTP/1.0 200 OK\r\n\r\n{"a": 1}', b'{"a": 1}'),
    (b'HTTP/1.1 200 OK\n\n', b''),
    (b'HTTP/1.1 204 No Content\r\n\r\nignored', b''),
])
def test_every_framing_a_server_uses_is_read(hostile_http, answer, body):
    server = hostile_http(raw(answer))
    assert fetch('GET', server.url + '/x', TIMEOUT) == (200 if b' 204 ' not in answer else 204, body)


def test_a_request_is_sent_as_one_closed_exchange_with_its_headers_and_json(http_responder):
    http_responder.route('POST', '/workers', status=202, json={'status': 'accepted'})
    assert fetch('POST', http_responder.url + '/workers?x=1', TIMEOUT, body={'url': 'http://w'},
                 headers=bearer('k')) == (202, b'{"status": "accepted"}')
    sent = http_responder.requests[0]
    assert (sent.method, sent.path, sent.query, sent.json) == ('POST', '/workers', 'x=1', {'url': 'http://w'})
    assert sent.headers['Authorization'] == 'Bearer k' and sent.headers['Connection'] == 'close'
    assert sent.headers['Content-Type'] == 'application/json'


@pytest.mark.parametrize('headers', [{'Authorization': 'Bearer k\r\nX-Injected: 1'}, {'Bad Name': 'x'},
                                     {'Authorization': 'Bearer \u2603'}])
def test_a_header_that_would_split_the_request_is_refused_and_nothing_is_sent(http_responder, headers):
    status, detail = http_request('GET', http_responder.url + '/health', TIMEOUT, headers=headers)
    assert status == NO_ANSWER and b'refused to send' in detail
    assert http_responder.requests == []


def test_a_refused_connection_is_an_http_error(servers):
    from helpers.http_responder import closed_port_url
    with pytest.raises(HttpError, match='connecting to 127.0.0.1'):
        fetch('GET', closed_port_url() + '/health', TIMEOUT)


# -- a name: resolution and every address share the one deadline ---------------------------------------------------

@pytest.fixture
def silent_address():
    """A loopback address whose connect never completes: a listener with a full backlog (one connection queued,
    never accepted) drops every further SYN, so a connect waits until its timeout, as an unreachable host's does."""
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(0)
    queued = socket.create_connection(listener.getsockname(), 5)
    yield listener.getsockname()
    queued.close()
    listener.close()


@pytest.fixture
def resolver(monkeypatch):
    """A fake getaddrinfo: names map to the loopback addresses a test gives (a list), to 'hang' (a lookup that waits
    as a dead DNS server makes it wait, released when the test ends) or to nothing (the name does not exist).
    Addresses written as numbers go to the real getaddrinfo, which never asks a resolver for them."""
    real, names, released = socket.getaddrinfo, {}, threading.Event()

    def getaddrinfo(host, port, family=0, kind=0, proto=0, flags=0):
        if flags & socket.AI_NUMERICHOST or host not in names:
            return real(host, port, family, kind, proto, flags)
        if names[host] == 'hang':
            released.wait(4 * TIMEOUT)
            raise socket.gaierror(socket.EAI_AGAIN, 'Temporary failure in name resolution')
        if not names[host]:
            raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, '', address) for address in names[host]]
    monkeypatch.setattr(socket, 'getaddrinfo', getaddrinfo)
    yield names
    released.set()


def responder_address(responder):
    return ('127.0.0.1', int(responder.url.rsplit(':', 1)[1]))


def test_a_name_the_resolver_never_answers_ends_by_the_deadline(resolver):
    resolver['dns-down.test'] = 'hang'
    failure, took = timed(lambda: fetch('GET', 'http://dns-down.test:30000/health', TIMEOUT))
    assert isinstance(failure, HttpTimeout)
    assert str(failure) == 'no complete answer within 2s (timed out resolving dns-down.test)'
    assert took < BOUND


def test_a_name_that_does_not_resolve_is_an_http_error_naming_it(resolver):
    resolver['nowhere.test'] = []
    with pytest.raises(HttpError, match='^resolving nowhere.test: .*Name or service not known'):
        fetch('GET', 'http://nowhere.test:30000/health', TIMEOUT)


def test_a_later_address_of_a_name_gets_only_the_time_the_earlier_ones_left(resolver, silent_address, http_responder):
    http_responder.route('GET', '/health', status=200)
    resolver['two.test'] = [silent_address, responder_address(http_responder)]
    failure, took = timed(lambda: fetch('GET', 'http://two.test:30000/health', TIMEOUT))
    # The first address took all the time there was: the second is never asked after the deadline.
    assert isinstance(failure, HttpTimeout)
    assert str(failure) == 'no complete answer within 2s (timed out connecting to two.test:30000)'
    assert http_responder.requests == []
    assert took < BOUND


def test_a_refused_address_of_a_name_gives_way_to_the_next(resolver, http_responder):
    from helpers.http_responder import closed_port_url
    http_responder.route('GET', '/health', status=200)
    closed = ('127.0.0.1', int(closed_port_url().rsplit(':', 1)[1]))
    resolver['two.test'] = [closed, responder_address(http_responder)]
    assert fetch('GET', 'http://two.test:30000/health', TIMEOUT) == (200, b'')


@pytest.fixture
def tls_trickle():
    """A listener on 127.0.0.1 that answers a ClientHello with the 5-byte header of a 16 KiB TLS handshake record,
    then one byte of it every 0.2 s: every read of the handshake gets a byte, and none finishes it."""
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(1)
    stopping = threading.Event()

    def serve():
        connection, dummy = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b'\x16\x03\x03\x40\x00')
            while not stopping.wait(0.2):
                try:
                    connection.sendall(b'\x00')
                except OSError:
                    return
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield 'https://127.0.0.1:%d' % listener.getsockname()[1]
    stopping.set()
    thread.join(10)
    listener.close()


def test_a_trickled_tls_handshake_cannot_outlast_the_whole_exchange_timeout(tls_trickle):
    failure, took = timed(lambda: fetch('GET', tls_trickle + '/health', TIMEOUT))
    assert isinstance(failure, HttpTimeout)
    assert str(failure) == 'no complete answer within 2s (timed out in the TLS handshake with 127.0.0.1:%s)' \
        % tls_trickle.rsplit(':', 1)[1]
    assert took < BOUND
