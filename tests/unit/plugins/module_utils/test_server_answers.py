"""_server's reads of a server's answers (/server_info, the load endpoints, one generation, /health) against a
broken or hostile server on loopback: each is a clear ServerError or a reading that says why, within its
timeout, never a RecursionError or an unbounded read."""
import pwd
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import NO_ANSWER
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import NotOurListener, Server, ServerError
from helpers.hostile_http import (  # noqa: F401  (hostile_http: the fixture)
    endless_line, hostile_http, huge_length, listing, nested_brackets, trickle)
from helpers.port_owner import Squatter, this_process_systemctl
from helpers.simulated import free_port


def server_at(url):
    # The server's main process is this test's, which listens on the hostile peer's port: the port is the server's.
    return Server('systemd', 'sglang', '/nonexistent/launch.json', '/nonexistent/pid', '/dev/null', url,
                  runner=this_process_systemctl)


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



@pytest.mark.parametrize('running', [True, False], ids=['running', 'down'])
def test_a_port_held_by_another_process_is_never_asked_and_every_read_says_whose_it_is(running):
    # Issue 41: a process that bound the server's port first (while it loaded its model, or while it is down) got
    # /health believed and every keyed request. Nothing goes to it now, and each read names it.
    port = free_port()
    url = 'http://127.0.0.1:%d' % port
    with Squatter(port, {'max_running_requests': 64, 'text': 'x', 'aggregate': {'total_reqs': 0}}) as squatter:
        server = server_at(url) if running else Server('detached', 'sglang', '/nonexistent/launch.json',
                                                       '/nonexistent/pid', '/dev/null', url)
        held = 'port %d is held by PID %d (user %s, command %s -c ' % (
            port, squatter.pid, pwd.getpwuid(squatter.uid).pw_name, squatter.python)
        said = ', not by the started server' + ('' if running else ' (the server is not running)')
        # A probe only says another process holds it; naming it searches every process's open files, done once.
        assert server.health(1) == NO_ANSWER and server.foreign_listener == 'port %d is held by another process%s' % (
            port, said)
        assert server.foreign_listener_named().startswith(held) and server.foreign_listener.endswith(said)
        with pytest.raises(NotOurListener) as refused:
            server.server_info()
        assert str(refused.value) == server.foreign_listener
        assert server.in_flight() == (None, server.foreign_listener)
        generated = server.generate_once(1)
        assert (generated['ok'], generated['status'], generated['why']) == (False, NO_ANSWER, server.foreign_listener)
        assert server.wait_ready(1, 0.3, 0.1)['why'].endswith('(last: %s)' % server.foreign_listener)
        assert server.wait_healthy(0.3, 0.1)['why'] == server.foreign_listener
    assert squatter.requests == []


def test_a_port_nothing_listens_on_is_not_asked_and_says_so(tmp_path):
    server = server_at('http://127.0.0.1:%d' % free_port())
    assert server.health(1) == NO_ANSWER and server.foreign_listener is None
    with pytest.raises(NotOurListener) as refused:
        server.server_info()
    assert str(refused.value) == 'nothing listens at %s' % server.base_url
