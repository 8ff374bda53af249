"""_server's reads of a server's answers (/server_info, the load endpoints, one generation, /health) against a
broken or hostile server on loopback: each is a clear ServerError or a reading that says why, within its
timeout, never a RecursionError or an unbounded read."""
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils._http import NO_ANSWER
from ansible_collections.gpuops.sglang.plugins.module_utils._server import Server, ServerError
from helpers.hostile_http import (  # noqa: F401  (hostile_http: the fixture)
    endless_line, hostile_http, huge_length, listing, nested_brackets, trickle)


def server_at(url):
    return Server('detached', 'sglang', '/nonexistent/launch.json', '/nonexistent/pid', '/dev/null', url)


@pytest.mark.parametrize('behaviour, said', [
    (nested_brackets(), '/server_info answered 200 with a body that is not JSON: JSON nested deeper than 64 levels'),
    (listing(['not', 'an', 'object']), '/server_info answered 200 with JSON that is not an object'),
    (huge_length(), '/server_info answered nothing: the answer is 10737418240 bytes (Content-Length), over the '
                    '1048576-byte cap'),
    (endless_line(b'application/json', b'{"a": "'),
     '/server_info answered nothing: the answer is longer than the 1048576-byte cap'),
], ids=['nested-brackets', 'a-list', 'huge-length', 'endless-body'])
def test_server_info_that_cannot_be_read_is_a_server_error(hostile_http, behaviour, said):
    with pytest.raises(ServerError) as raised:
        server_at(hostile_http(behaviour).url).server_info()
    assert str(raised.value) == said


def test_a_load_endpoint_answering_nested_brackets_is_a_reading_that_says_why(hostile_http):
    count, why = server_at(hostile_http(nested_brackets()).url).in_flight()
    assert count is None
    assert why == '/v1/loads answered 200 with an unexpected body (JSON nested deeper than 64 levels)'


def test_a_generation_answering_nested_brackets_is_not_a_generation(hostile_http):
    result = server_at(hostile_http(nested_brackets()).url).generate_once(5)
    assert result['ok'] is False and result['why'] == 'POST /generate answered 200 without a generated text'


def test_a_trickling_health_endpoint_is_no_answer_within_the_probe_timeout(hostile_http):
    server = server_at(hostile_http(trickle()).url)
    begun = time.monotonic()
    assert server.health(timeout=1.0) == NO_ANSWER
    assert time.monotonic() - begun < 3 * 1.0

