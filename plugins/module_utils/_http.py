# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP to a server or router on the host itself: one request, its status and body, never an exception.

Base layer, standard library only: the host-side guard probes /health and the router without Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import ssl

try:  # Python 3
    from http.client import HTTPConnection, HTTPException, HTTPSConnection
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 targets are not supported
    HTTPConnection = HTTPException = HTTPSConnection = urlsplit = None

# What http_request answers when nothing answered (refused, timed out, a bad URL).
NO_ANSWER = -1


def http_request(method, url, timeout, body=None, headers=None, ssl_context=None):
    """(status, body bytes) of one request; status -1 when nothing answered.

    http.client rather than urllib: the probe goes straight to the server's own address and never
    through an http_proxy the environment may name (and it runs without Ansible in the guard).
    A dict body is sent as JSON. An https URL (a router behind TLS) is spoken over TLS, its
    certificate verified against the system's trust store (ssl_context overrides it); any other
    scheme than http or https is refused as no answer, never spoken as plain HTTP.
    """
    parts = urlsplit(url)
    headers = dict(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body).encode('utf-8')
        headers.setdefault('Content-Type', 'application/json')
    try:
        connection = open_connection(parts, timeout, ssl_context)
        try:
            connection.request(method, (parts.path or '/') + ('?' + parts.query if parts.query else ''),
                               body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()
    except (HTTPException, OSError, ValueError) as exc:
        return NO_ANSWER, str(exc).encode('utf-8', 'replace')


def open_connection(parts, timeout, ssl_context=None):
    """An unopened http.client connection for a urlsplit() URL: TLS for https, plain for http, else ValueError."""
    if parts.scheme == 'https':
        return HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout,
                               context=ssl_context or ssl.create_default_context())
    if parts.scheme == 'http':
        return HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    raise ValueError('only http and https URLs are spoken (got %r)' % (parts.scheme or 'no scheme'))


def http_get(url, timeout):
    return http_request('GET', url, timeout)


def bearer(api_key):
    """The request headers that carry an API key (none without one), as SGLang and its router read them."""
    return {'Authorization': 'Bearer %s' % api_key} if api_key else {}
