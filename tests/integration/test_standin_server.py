"""The lab's stand-in SGLang server answers what the router and a fleet redeploy need, on loopback.

It runs here as a plain process (no container): its scheduler children are replaced by sleepers and
its drain gate lives under tmp_path, so the test decides when the drain ends. Nothing waits for a
fixed time: every step polls for the state it needs, and the drain gate holds the server in its
drain for as long as the test looks at it.
"""
import os
import pathlib
import signal
import time
import subprocess
import sys
import threading

import pytest

from helpers.simulated import free_port, wait_for
from helpers.standin import call, status, write_standin_module


@pytest.fixture
def standin(request, tmp_path):
    """(process, base URL, drain gate path); SGLANG_STANDIN_GENERATE_DELAY from indirect parametrization (default 0.2)."""
    delay = getattr(request, 'param', '0.2')
    module, pythonpath, gate = write_standin_module(tmp_path)
    gate = pathlib.Path(gate)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=pythonpath, LAB_STANDIN_WARMUP='0', LAB_STANDIN_DRAIN='0',
               SGLANG_STANDIN_GENERATE_DELAY=delay)
    # Its own process group: the teardown ends the stand-in and its sglang::-titled children together,
    # so none is left on the machine for a later test's process scan to find.
    proc = subprocess.Popen([sys.executable, '-m', module, '--model-path', '/models/m', '--host', '127.0.0.1', '--port', str(port)],
                            env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    base = 'http://127.0.0.1:%d' % port
    try:
        wait_for(lambda: status(base + '/health') == 200, 30, 'the stand-in to answer /health')
        yield proc, base, gate
    finally:
        if gate.exists():
            gate.unlink()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_generate_loads_and_model_info_have_sglang_shapes(standin):
    proc, base, gate = standin
    code, answer = call('POST', base + '/generate', {'text': 'Hello', 'sampling_params': {'max_new_tokens': 3}})
    assert code == 200
    assert isinstance(answer['text'], str)
    assert answer['meta_info']['finish_reason'] == {'type': 'length', 'length': 3}
    assert answer['meta_info']['completion_tokens'] == 3
    code, batch = call('POST', base + '/generate', {'text': ['a', 'b'], 'sampling_params': {'max_new_tokens': 1}})
    assert code == 200 and len(batch) == 2
    assert call('POST', base + '/generate', {'sampling_params': {}})[0] == 400
    # The answer goes out before the request is counted out (as upstream, whose scheduler's counts are
    # read apart from the HTTP answer): the loads come back to idle shortly after, not necessarily at once.
    deadline = time.monotonic() + 10
    while True:
        code, loads = call('GET', base + '/v1/loads')
        assert code == 200
        idle = loads['loads'][0]['num_running_reqs'] == 0 and loads['loads'][0]['num_total_reqs'] == 0
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert set(loads) == {'timestamp', 'version', 'dp_rank_count', 'loads', 'aggregate'}
    assert loads['dp_rank_count'] == 1
    assert idle, loads
    assert {'total_running_reqs', 'total_waiting_reqs', 'total_reqs'} <= set(loads['aggregate'])
    code, legacy = call('GET', base + '/get_load')
    assert code == 200
    assert set(legacy[0]) == {'dp_rank', 'num_reqs', 'num_waiting_reqs', 'num_tokens', 'num_pending_tokens', 'ts_tic'}
    for path in ('/model_info', '/get_model_info'):
        code, info = call('GET', base + path)
        assert code == 200 and info['model_path'] == '/models/m' and info['is_generation'] is True
    assert call('GET', base + '/server_info')[1]['environment']['SGLANG_STANDIN_GENERATE_DELAY'] == '0.2'


# Long enough that the requests are certainly still running when the test counts them; the drain gate,
# not this delay, is what keeps the server alive while the test checks the drain.
@pytest.mark.slow
@pytest.mark.parametrize('standin', ['8'], indirect=True)
def test_sigterm_refuses_new_work_finishes_requests_in_flight_then_exits(standin):
    proc, base, gate = standin
    results = []

    def one():
        results.append(call('POST', base + '/generate', {'text': 'x', 'sampling_params': {'max_new_tokens': 2}}))
    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()

    def running():
        loads = call('GET', base + '/v1/loads')[1]
        return loads['aggregate']['total_running_reqs']
    wait_for(lambda: running() == 3, 30, 'three requests in flight')
    assert call('GET', base + '/get_load')[1][0]['num_reqs'] == 3

    gate.touch()  # the drain lasts until the test removes this
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: status(base + '/health') == 503, 30, '/health to answer 503 after SIGTERM')
    assert status(base + '/health_generate') == 503
    code, refused = call('POST', base + '/generate', {'text': 'late', 'sampling_params': {}})
    assert code == 503, refused
    for thread in threads:
        thread.join(60)
    assert [code for code, dummy in results] == [200, 200, 200]
    # The count drops just after each answer is written (as the test above says of the loads), not before it.
    wait_for(lambda: running() == 0, 10, 'no request running once all three were answered')
    assert proc.poll() is None  # still draining: the gate holds it
    gate.unlink()
    assert proc.wait(60) == 0
