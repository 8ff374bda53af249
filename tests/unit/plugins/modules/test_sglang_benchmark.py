"""sglang_benchmark's main() against a responder that streams /generate as SGLang does: what it measures and
sends (the key from the launch configuration), check mode, the drain first, and how it refuses bad levels."""
import json
import os
import pwd

import pytest

from helpers.http_responder import Reply, http_responder  # noqa: F401  (the fixture)
from helpers.module_runner import run_module  # noqa: F401  (the fixture)
from helpers.port_owner import Squatter, this_process_systemctl
from helpers.simulated import free_port
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import read_lease
from ansible_collections.gpuops.sglang.plugins.modules import sglang_benchmark

KEYS = {'changed', 'measured', 'levels', 'metrics', 'elapsed_s', 'drain', 'msg'}
LEVEL_KEYS = {'concurrency', 'requests', 'completed', 'errors', 'output_tokens', 'wall_s', 'output_tok_s',
              'ttft_p50_s', 'ttft_p95_s', 'itl_p50_s', 'itl_p95_s', 'timed_out', 'first_error'}
METRICS_TEXT = ('# TYPE sglang:gen_throughput gauge\nsglang:gen_throughput{model_name="m"} 401.5\n'
                '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 2.5\n')


def sse(tokens):
    events = ['data: %s\n\n' % json.dumps({'text': ' t' * count, 'meta_info': {
        'completion_tokens': count, 'finish_reason': {'type': 'length'} if count == tokens else None}})
        for count in range(1, tokens + 1)]
    return ''.join(events) + 'data: [DONE]\n\n'


def no_commands(argv):
    raise AssertionError('sglang_benchmark ran a command: %r' % argv)


@pytest.fixture
def launch(tmp_path):
    """A launch configuration as the role writes it: the API key in the --config file beside it."""
    keys = tmp_path / 'server_keys.yaml'
    keys.write_text('api-key: "s3cret"\n')
    path = tmp_path / 'launch.json'
    path.write_text(json.dumps({'python': '/usr/bin/python3', 'module': 'sglang.launch_server',
                                'args': ['--port', '30000', '--config', str(keys)], 'environment': {}}))
    return str(path)


def test_each_level_is_measured_with_the_servers_own_key(run_module, http_responder, launch):
    http_responder.route('POST', '/generate', body=sse(4))
    http_responder.route('GET', '/metrics', body=METRICS_TEXT)
    result, calls = run_module(sglang_benchmark.main, dict(url=http_responder.url, launch_file=launch, levels=[1, 2],
                                                           requests=4, max_new_tokens=4), no_commands)
    assert set(result) - {'failed'} == KEYS and not result['failed'] and not result['changed']
    assert result['measured'] is True
    assert [(level['concurrency'], level['completed'], level['errors'], level['output_tokens'])
            for level in result['levels']] == [(1, 4, 0, 16), (2, 4, 0, 16)]
    assert all(set(level) == LEVEL_KEYS for level in result['levels'])
    assert result['metrics'] == {'gen_throughput': 401.5, 'spec_accept_length': 2.5}
    assert result['drain'] is None
    assert result['msg'].startswith('measured %s: concurrency 1: ' % http_responder.url)
    generates = http_responder.requests_to('POST', '/generate')
    assert len(generates) == 8 and {request.headers['Authorization'] for request in generates} == {'Bearer s3cret'}
    assert generates[0].json['sampling_params'] == {'max_new_tokens': 4, 'ignore_eos': True, 'temperature': 0}


def test_a_server_without_metrics_is_measured_from_outside_alone(run_module, http_responder):
    http_responder.route('POST', '/generate', body=sse(2))
    result, dummy = run_module(sglang_benchmark.main, dict(url=http_responder.url, levels=[1], requests=2),
                               no_commands)
    assert result['measured'] is True and result['levels'][0]['completed'] == 2
    assert result['metrics'] is None
    assert 'Authorization' not in http_responder.requests_to('POST', '/generate')[0].headers


def test_a_refusing_server_is_measured_as_errors_not_a_module_failure(run_module, http_responder):
    http_responder.route('POST', '/generate', replies=[Reply(status=503)])
    result, dummy = run_module(sglang_benchmark.main, dict(url=http_responder.url, levels=[2], requests=4,
                                                           read_metrics=False), no_commands)
    assert not result['failed']
    assert (result['levels'][0]['errors'], result['levels'][0]['completed']) == (4, 0)
    assert 'concurrency 2: 0.0 output tok/s, 4 error(s)' in result['msg']


def test_check_mode_measures_nothing_and_says_so(run_module, http_responder):
    result, dummy = run_module(sglang_benchmark.main, dict(url=http_responder.url, levels=[1, 16]), no_commands,
                               check_mode=True)
    assert not result['failed'] and not result['changed']
    assert (result['measured'], result['levels'], result['metrics'], result['elapsed_s']) == (False, [], None, 0.0)
    assert result['msg'] == 'check mode: nothing was measured (a benchmark is load on the server)'
    assert http_responder.requests == []


def test_with_a_drain_timeout_the_requests_in_flight_finish_first(run_module, http_responder):
    http_responder.route('GET', '/v1/loads', replies=[Reply(json={'aggregate': {'total_reqs': 2}}),
                                                      Reply(json={'aggregate': {'total_reqs': 0}})])
    http_responder.route('POST', '/generate', body=sse(2))
    result, dummy = run_module(sglang_benchmark.main, dict(url=http_responder.url, levels=[1], requests=1,
                                                           drain_timeout=10, read_metrics=False), no_commands)
    assert result['drain']['idle'] is True and result['drain']['in_flight_at_start'] == 2
    paths = [request.path for request in http_responder.requests]
    assert paths.index('/generate') > max(index for index, path in enumerate(paths) if path == '/v1/loads')


@pytest.mark.parametrize('args, msg', [
    (dict(levels=[]), 'levels must list positive concurrencies'),
    (dict(levels=[1, 0]), 'levels must list positive concurrencies'),
    (dict(levels=[1], requests=0), 'requests must be greater than 0'),
    (dict(levels=[1], timeout=0), 'timeout must be greater than 0'),
])
def test_bad_arguments_fail_with_a_clear_message(run_module, http_responder, args, msg):
    result, dummy = run_module(sglang_benchmark.main, dict(args, url=http_responder.url), no_commands)
    assert result['failed'] and result['msg'] == msg
    assert set(result) - {'failed'} == KEYS
    assert http_responder.requests == []


def test_inside_the_window_the_benchmark_renews_the_guards_lease(run_module, http_responder, tmp_path):
    http_responder.route('POST', '/generate', body=sse(2))
    folder = tmp_path / 'guard'
    folder.mkdir()
    (folder / 'state.json').write_text(json.dumps({'run_id': 'run-1', 'armed_at': 1.0, 'deadline': 9e10, 'idle': 90}))
    args = dict(url=http_responder.url, levels=[1, 2], requests=2, timeout=30, read_metrics=False,
                guard={'folder': str(folder), 'run_id': 'run-1', 'after': 40})
    result, dummy = run_module(sglang_benchmark.main, args, no_commands)
    assert not result['failed'] and result['measured'] is True
    assert read_lease(str(folder))['by'] == 'sglang_benchmark (done)'
    # A guard that is not this run's any more (it restored): nothing is measured, the message says why.
    refused, dummy = run_module(sglang_benchmark.main, dict(args, guard={'folder': str(folder), 'run_id': 'run-2'}),
                                no_commands)
    assert refused['failed'] and 'the rollback guard of run run-2 is not armed' in refused['msg']
    assert refused['measured'] is False and len(http_responder.requests_to('POST', '/generate')) == 4


# --- whose port (issue 41): given the server's identity, the load and the key go only to the server's own socket ---

MAIN_PID = ['systemctl', 'show', '--property=MainPID', '--value', 'sglang']


def the_unit_is_this_process(argv):
    """systemctl for a running unit whose main process is this test's (which holds the responder's socket)."""
    return this_process_systemctl(argv, None)


def identity(launch, url, manager='systemd', **extra):
    """The server's identity as the role hands it (_sglang_server), with the benchmark's own options."""
    return dict(extra, manager=manager, service_name='sglang', launch_file=launch,
                pidfile='/nonexistent/sglang.pid', url=url)


@pytest.mark.parametrize('manager, said', [
    ('systemd', ', not by the started server'),
    # A detached server whose pid file names nothing: it is gone, and its port is someone else's.
    ('detached', ', not by the started server (the server is not running)'),
])
@pytest.mark.parametrize('drain_timeout', [0, 10], ids=['no-drain', 'drain'])
def test_a_squatter_on_the_port_gets_no_request_and_no_key_and_is_named(run_module, launch, manager, said,
                                                                         drain_timeout):
    # Issue 41: a local user bound the server's port (between the start's verification and the performance gate,
    # say) and answers as SGLang would. The benchmark sent it the drain's reads, every /generate and the server's
    # key, and measured it as the server.
    port = free_port()
    with Squatter(port, {'aggregate': {'total_reqs': 0}, 'text': 'x'}) as squatter:
        result, calls = run_module(sglang_benchmark.main, identity(
            launch, 'http://127.0.0.1:%d' % port, manager, levels=[1, 2], requests=2, max_new_tokens=2,
            drain_timeout=drain_timeout), the_unit_is_this_process if manager == 'systemd' else no_commands)
    assert result['failed'] and set(result) - {'failed'} == KEYS
    assert (result['measured'], result['levels'], result['metrics'], result['drain']) == (False, [], None, None)
    assert result['msg'].startswith('port %d is held by PID %d (user %s, command %s -c ' % (
        port, squatter.pid, pwd.getpwuid(squatter.uid).pw_name, squatter.python))
    assert said + ': nothing was measured or sent' in result['msg']
    assert squatter.requests == [] and 'Bearer s3cret' not in squatter.authorizations()


@pytest.mark.parametrize('drain_timeout, drain_reads', [(0, 0), (10, 2)], ids=['no-drain', 'drain'])
def test_the_servers_own_listener_is_measured_with_its_key(run_module, http_responder, launch, drain_timeout,
                                                           drain_reads):
    # The unit's main process is this test's, which holds the responder's listening socket: the port is the server's.
    http_responder.route('GET', '/v1/loads', json={'aggregate': {'total_reqs': 0}})
    http_responder.route('POST', '/generate', body=sse(4))
    http_responder.route('GET', '/metrics', body=METRICS_TEXT)
    result, calls = run_module(sglang_benchmark.main, identity(launch, http_responder.url, levels=[1, 2], requests=4,
                                                               max_new_tokens=4, drain_timeout=drain_timeout),
                               the_unit_is_this_process)
    assert not result['failed'] and set(result) - {'failed'} == KEYS and result['measured'] is True
    assert [(level['completed'], level['errors']) for level in result['levels']] == [(4, 0), (4, 0)]
    assert result['metrics']['gen_throughput'] == 401.5
    assert (result['drain'] or {}).get('idle', False) is bool(drain_timeout)
    generates = http_responder.requests_to('POST', '/generate')
    assert len(generates) == 8 and {request.headers['Authorization'] for request in generates} == {'Bearer s3cret'}
    # Checked before anything was sent, before each of the drain's reads (two zeros in a row), before each level and
    # before /metrics: systemd named the unit's main PID each time.
    assert len(http_responder.requests_to('GET', '/v1/loads')) == drain_reads
    assert calls.count(MAIN_PID) == 1 + drain_reads + 2 + 1


def test_a_server_gone_between_levels_gets_no_more_requests(run_module, http_responder, launch):
    # After the first level systemd says the unit is gone (MainPID 0): whatever holds its port now (this test's
    # responder) is not the server, and the next level's requests, with the key, are not sent.
    http_responder.route('POST', '/generate', body=sse(2))
    main_pids = []

    def the_unit_dies_after_the_first_level(argv):
        if argv == MAIN_PID:
            main_pids.append(argv)
            if len(main_pids) > 2:
                return 0, '0\n', ''
        return this_process_systemctl(argv, None)
    result, calls = run_module(sglang_benchmark.main, identity(launch, http_responder.url, levels=[1, 2], requests=2,
                                                               max_new_tokens=2), the_unit_dies_after_the_first_level)
    assert result['failed'] and set(result) - {'failed'} == KEYS and result['measured'] is False
    assert result['msg'].startswith('benchmarking the server at %s failed: before concurrency 2, nothing sent: port'
                                    ' %s is held by PID %d (user ' % (http_responder.url,
                                                                      http_responder.url.rsplit(':', 1)[1],
                                                                      os.getpid()))
    assert result['msg'].endswith(', not by the started server (the server is not running)')
    assert len(http_responder.requests_to('POST', '/generate')) == 2


def test_the_servers_identity_is_all_or_nothing(run_module, http_responder, launch):
    # A pid file without the manager would look checked and not be; a manager without the pid file names no server.
    for args, missing in ((dict(pidfile='/run/sglang.pid'), "missing parameter(s) required by 'pidfile': manager"),
                          (dict(manager='detached', launch_file=launch),
                           "missing parameter(s) required by 'manager': pidfile")):
        result, dummy = run_module(sglang_benchmark.main, dict(args, url=http_responder.url, levels=[1]), no_commands)
        assert result['failed'] and result['msg'] == missing
    assert http_responder.requests == []
