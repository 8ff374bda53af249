"""The pure parts of bench/load.py: the loopback rule, the schedule, the stop rule and the tally."""
import json
import urllib.error

import pytest

from bench import load


@pytest.mark.parametrize('url', ['http://127.0.0.1:30080', 'http://127.0.0.14:30000/health',
                                 'http://127.255.255.254/generate'])
def test_loopback_urls_are_accepted(url):
    assert load.loopback_url(url) == url


@pytest.mark.parametrize('url', ['http://10.0.0.1:30080', 'http://localhost:30080', 'http://[::1]:30080',
                                 'https://127.0.0.1:30080', 'http://example.com/', 'http://128.0.0.1/',
                                 'file:///etc/passwd', 'http://:30080'])
def test_anything_else_is_refused(url):
    with pytest.raises(ValueError):
        load.loopback_url(url)


def test_argument_check_refuses_a_remote_health_url(capsys):
    with pytest.raises(SystemExit) as exc:
        load.parse_args(['--url', 'http://127.0.0.1:30080', '--duration', '1', '--health', 'http://192.168.1.5/health'])
    assert exc.value.code == 2
    assert '192.168.1.5' in capsys.readouterr().err


@pytest.mark.parametrize('argv', [
    ['--url', 'http://127.0.0.1:1'],                                            # neither duration nor stop file
    ['--url', 'http://127.0.0.1:1', '--duration', '10', '--max-duration', '5'],
    ['--url', 'http://127.0.0.1:1', '--duration', '1', '--rate', '0'],
    ['--url', 'http://127.0.0.1:1', '--duration', '1', '--concurrency', '0'],
    ['--url', 'http://127.0.0.1:1', '--duration', '1', '--health-interval', '0.5'],
])
def test_argument_check_refuses_unbounded_or_slow_settings(argv):
    with pytest.raises(SystemExit):
        load.parse_args(argv)


def test_a_stop_file_alone_is_enough():
    args = load.parse_args(['--url', 'http://127.0.0.1:30080', '--stop-file', '/tmp/x', '--health',
                            'http://127.0.0.12:30000/health', '--health', 'http://127.0.0.13:30000/health'])
    assert args.duration is None and args.max_duration == 900 and len(args.health) == 2


def test_generate_url():
    assert load.generate_url('http://127.0.0.1:30080') == 'http://127.0.0.1:30080/generate'
    assert load.generate_url('http://127.0.0.1:30080/') == 'http://127.0.0.1:30080/generate'
    assert load.generate_url('http://127.0.0.1:30080/generate') == 'http://127.0.0.1:30080/generate'


def test_next_due_keeps_the_rate_and_never_bursts_to_catch_up():
    assert load.next_due(10.0, 10.0, 0.5) == 10.5
    assert load.next_due(10.0, 10.4, 0.5) == 10.5
    # far behind (a stall): resume from now, not with a burst of missed requests
    assert load.next_due(10.0, 13.0, 0.5) == 13.0


def test_should_stop():
    assert load.should_stop(1, 10, 60, False) is None
    assert load.should_stop(10, 10, 60, False) == 'duration'
    assert load.should_stop(2, None, 60, True) == 'stop_file'
    assert load.should_stop(60, None, 60, False) == 'max_duration'
    assert load.should_stop(61, 100, 60, True) == 'max_duration'


def test_failure_reasons():
    assert load.failure_reason(503, b'{"error":\n "draining"}') == 'HTTP 503: {"error": "draining"}'
    assert load.failure_reason(500, b'x' * 500) == 'HTTP 500: ' + 'x' * 200
    assert load.failure_reason(error=urllib.error.URLError(ConnectionRefusedError(111, 'Connection refused'))) \
        == 'connection: [Errno 111] Connection refused'
    assert load.failure_reason(error=TimeoutError('timed out')) == 'connection: timed out'


def test_tally_counts_keeps_the_first_failures_and_the_fewest_healthy():
    tally = load.Tally(['a', 'b', 'c'], keep=2)
    tally.request_done(0.1)
    for i in range(4):
        tally.request_done(1.0 + i, 'HTTP 503: no')
    for at, healthy in ((0.0, 3), (0.1, 2), (0.2, 3), (0.3, 2)):
        tally.health_sample(at, healthy)
    summary = tally.summary(5.0, 'duration')
    assert json.loads(json.dumps(summary)) == summary
    assert summary['requests_total'] == 5 and summary['requests_failed'] == 4
    assert summary['failures'] == [{'at_s': 1.0, 'reason': 'HTTP 503: no'}, {'at_s': 2.0, 'reason': 'HTTP 503: no'}]
    assert summary['min_healthy'] == 2 and summary['min_healthy_at_s'] == 0.1
    assert summary['samples'] == 4 and summary['hosts_watched'] == 3 and summary['stopped_by'] == 'duration'


def test_no_health_url_means_no_minimum():
    assert load.Tally([]).summary(1.0, 'duration')['min_healthy'] is None


def test_the_health_timeout_reaches_every_probe(monkeypatch):
    """The sampler's timeout reaches each probe: the default (five intervals, at least 0.5 s) or --health-timeout."""
    import threading
    asked = []

    def probe(url, timeout):
        asked.append(timeout)
        return True
    monkeypatch.setattr(load, 'probe', probe)
    for timeout, expected in ((None, 0.5), (5.0, 5.0)):
        tally, stop = load.Tally(['http://127.0.0.1:1/health']), threading.Event()
        tally.health_sample = lambda at_s, healthy, stop=stop: stop.set()
        load.watch_health(tally, tally.health_urls, 0.1, stop, 0.0, timeout)
        assert asked.pop() == expected
    assert load.parse_args(['--url', 'http://127.0.0.1:30080', '--stop-file', '/tmp/x',
                            '--health-timeout', '5']).health_timeout == 5.0
