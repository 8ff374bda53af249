"""_http speaks the scheme its URL names: https over TLS with the certificate verified, http in plain text,
anything else refused as no answer. Against real loopback servers (a TLS one with a certificate made here)."""
import datetime
import ipaddress
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.gpuops.sglang.plugins.module_utils._http import NO_ANSWER, http_get, http_request


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
