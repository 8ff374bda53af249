"""The serving benchmark against the lab's stand-in run as a real process on loopback, and the stand-in's model.

The benchmark (plugins/module_utils/domain/_serving_benchmark.py) streams SGLang's /generate from the stand-in:
the chunks it parses, the tokens it counts, the errors a refusing server gives, the time bound while the
generate gate holds every request. The model's shape is checked through its deterministic parts (the draft
steps and acceptance length the stand-in reports per batch size, the tokens it streams), never through
timing ratios: CI runs on a loaded machine.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._serving_benchmark import run_benchmark
from helpers.ansible_run import REPO, run_task
from helpers.simulated import free_port, wait_for
from helpers.standin import write_standin_module

EAGLE3 = ['--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path', '/models/draft',
          '--speculative-num-steps', '3', '--speculative-eagle-topk', '1', '--speculative-num-draft-tokens', '4']
PATCH = os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff')
# The demo patch plus DYNAMIC_SPEC_STOPS_DRAFTING = True: a test fixture that declares the stop to the stand-in.
STOPS_PATCH = os.path.join(REPO, 'tests', 'fixtures', 'patches', 'eagle_dynamic_spec_stops_drafting.diff')
# The tiers the role writes for threshold 8 with 3 draft steps (roles/sglang/vars/main.yml).
ROLE_TIERS = {'1': {'candidate_steps': [1, 3]}, '8': {'candidate_steps': [0]}}


def get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return None, b''


class Standins(object):
    """Stand-ins started as the role starts sglang.launch_server, each ended with its process group."""

    def __init__(self, tmp_path):
        self.module, self.pythonpath, self.gate = write_standin_module(tmp_path)
        self.procs = []

    def start(self, *args, **options):
        port = free_port()
        env = dict(os.environ, PYTHONPATH=self.pythonpath, LAB_STANDIN_WARMUP='0', LAB_STANDIN_DRAIN='0',
                   **options.get('env', {}))
        proc = subprocess.Popen([options.get('python', sys.executable), '-m', self.module, '--model-path', '/models/m',
                                 '--host', '127.0.0.1', '--port', str(port)] + list(args),
                                env=env, stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        base = 'http://127.0.0.1:%d' % port
        headers = {'Authorization': 'Bearer %s' % options['api_key']} if 'api_key' in options else {}
        wait_for(lambda: get(base + '/health')[0] == 200, 30, 'the stand-in to answer /health')
        info = json.loads(get(base + '/server_info', headers)[1])
        return base, proc, info['internal_states'][0]['standin_decode']

    def stop(self):
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.fixture
def standins(tmp_path):
    made = Standins(tmp_path)
    yield made
    made.stop()


def stream_lines(base, body):
    request = urllib.request.Request(base + '/generate', data=json.dumps(body).encode(), method='POST',
                                     headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.headers['Content-Type'], response.read().decode().split('\n\n')


def test_the_stream_is_sglang_s_server_sent_events(standins):
    base, dummy, model = standins.start(*EAGLE3)
    kind, events = stream_lines(base, {'text': 'Hello', 'stream': True, 'sampling_params': {
        'max_new_tokens': 10, 'ignore_eos': True, 'temperature': 0}})
    assert kind == 'text/event-stream'
    assert events[-2:] == ['data: [DONE]', '']
    chunks = [json.loads(event[len('data: '):]) for event in events[:-2]]
    tokens = [chunk['meta_info']['completion_tokens'] for chunk in chunks]
    # EAGLE-3 at a batch of 1: several tokens a step (the acceptance length), cumulative, up to max_new_tokens.
    assert tokens == sorted(tokens) and tokens[-1] == 10 and len(chunks) < 10
    assert [chunk['meta_info']['finish_reason'] for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]['meta_info']['finish_reason'] == {'type': 'length', 'length': 10}
    assert len({chunk['meta_info']['id'] for chunk in chunks}) == 1
    assert chunks[-1]['text'] == ' tok' * 10 and chunks[-1]['meta_info']['prompt_tokens'] == 1
    assert model['accept_length_by_batch_size']['1'] > 2


def test_the_benchmark_counts_streamed_tokens_and_reads_the_metrics(standins):
    base, dummy, model = standins.start('--enable-metrics')
    progress = []
    result = run_benchmark(base, [1, 4], 8, 12, 'Hello', 120, on_progress=lambda: progress.append(1))
    assert [(lvl['concurrency'], lvl['completed'], lvl['errors'], lvl['output_tokens'], lvl['timed_out'])
            for lvl in result['levels']] == [(1, 8, 0, 96, False), (4, 8, 0, 96, False)]
    for level in result['levels']:
        assert level['output_tok_s'] > 0 and level['ttft_p50_s'] > 0 and level['itl_p95_s'] > 0
    assert result['metrics']['gen_throughput'] > 0
    assert result['metrics']['spec_accept_length'] == 0.0  # no speculation
    assert set(model['draft_steps_by_batch_size'].values()) == {0}
    assert len(progress) >= 2


def test_a_server_without_metrics_answers_404_and_is_measured_from_outside(standins):
    base, dummy, dummy = standins.start()
    assert get(base + '/metrics')[0] == 404
    result = run_benchmark(base, [2], 4, 4, 'Hello', 120)
    assert result['metrics'] is None
    assert (result['levels'][0]['completed'], result['levels'][0]['output_tokens']) == (4, 16)


def test_a_refusing_server_counts_errors_and_the_api_key_admits(standins):
    base, dummy, dummy = standins.start('--api-key', 'k3y', '--enable-metrics', api_key='k3y')
    refused = run_benchmark(base, [1, 3], 4, 4, 'Hello', 120, read_metrics=False)
    assert [(lvl['errors'], lvl['completed'], lvl['output_tokens']) for lvl in refused['levels']] == [(4, 0, 0)] * 2
    admitted = run_benchmark(base, [3], 4, 4, 'Hello', 120, api_key='k3y')
    assert (admitted['levels'][0]['errors'], admitted['levels'][0]['completed']) == (0, 4)
    assert admitted['metrics']['gen_throughput'] > 0  # /metrics stays open, as upstream's auth leaves it


@pytest.mark.slow
def test_a_level_that_runs_out_of_time_stops_and_says_so(standins):
    base, proc, dummy = standins.start()
    gate = standins.gate + '.generate'
    with open(gate, 'w') as handle:
        handle.write(str(proc.pid))  # every request of this server stays in flight (at most 120 s)
    try:
        result = run_benchmark(base, [2], 6, 4, 'Hello', 2)
    finally:
        os.unlink(gate)
    level = result['levels'][0]
    assert (level['timed_out'], level['completed'], level['errors'], level['output_tokens']) == (True, 0, 0, 0)
    assert result['elapsed_s'] < 60  # the level's 2 s, not the gate's 120 s


def test_max_running_requests_bounds_the_batch_and_slowdown_scales_every_step(standins):
    base, dummy, slow = standins.start('--max-running-requests', '4', env={'LAB_STANDIN_SLOWDOWN': '3'})
    dummy, dummy, plain = standins.start()
    assert slow['max_running_requests'] == 4 and slow['slowdown'] == 3.0
    for size in ('1', '4', '64'):
        assert slow['step_time_s_by_batch_size'][size] == pytest.approx(3 * plain['step_time_s_by_batch_size'][size])
    # Eight requests at once on a batch of four: all answered, all tokens streamed.
    result = run_benchmark(base, [8], 8, 3, 'Hello', 120, read_metrics=False)
    assert (result['levels'][0]['completed'], result['levels'][0]['output_tokens']) == (8, 24)


def test_draft_steps_follow_the_installed_release(standins, native_sglang, tmp_path):
    """No speculation: none; EAGLE-3: the configured steps at every batch size; 0.5.23 adaptive: its tiers."""
    venv, dummy = native_sglang
    tiers = tmp_path / 'adaptive.json'
    tiers.write_text(json.dumps(ROLE_TIERS))
    dummy, dummy, eagle = standins.start(*EAGLE3)
    dummy, dummy, adaptive = standins.start(*(EAGLE3 + ['--speculative-adaptive', '--speculative-adaptive-config',
                                                        str(tiers)]), python=str(venv / 'bin' / 'python'))
    assert set(eagle['draft_steps_by_batch_size'].values()) == {3}
    steps = adaptive['draft_steps_by_batch_size']
    assert [steps[str(size)] for size in (1, 7, 8, 16, 48)] == [3, 3, 0, 0, 0]
    accept = adaptive['accept_length_by_batch_size']
    assert accept['1'] == eagle['accept_length_by_batch_size']['1'] > 2 and accept['16'] == 1.0
    # Drafting stopped from the threshold: a step there costs what plain decoding's does (no draft passes).
    assert adaptive['step_time_s_by_batch_size']['16'] < eagle['step_time_s_by_batch_size']['16']


@pytest.mark.slow
def test_env_mode_with_the_demo_patch_drafts_at_every_batch_size(standins, sglang_venv, tmp_path):
    """The demo patch defines the variable and counts the batches over it; it never stops drafting."""
    python, dummy = sglang_venv
    applied = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': PATCH, 'python': python}, name='apply')
    assert not applied.failed, applied['msg']
    dummy, dummy, env_mode = standins.start(*EAGLE3, python=python,
                                            env={'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8'})
    assert set(env_mode['draft_steps_by_batch_size'].values()) == {3}
    assert env_mode['accept_length_by_batch_size']['16'] > 2


def patched_copy(pristine_sglang, tmp_path, name, patch):
    """A private copy of the pristine release with patch applied by gpuops.sglang.sglang_patch: its python."""
    venv, site = pristine_sglang
    copy = tmp_path / name
    shutil.copytree(str(venv), str(copy), symlinks=True)
    python = str(copy / 'bin' / 'python')
    applied = run_task(tmp_path, 'gpuops.sglang.sglang_patch', {'src': patch, 'python': python}, name='apply-' + name)
    assert not applied.failed, applied['msg']
    assert applied['changed'] is True and applied['files'] == ['sglang/srt/speculative/eagle_worker.py']
    return python


@pytest.mark.slow
def test_env_mode_stops_drafting_only_under_a_patch_that_declares_it(standins, pristine_sglang, tmp_path):
    """The fixture patch declares the stop: no draft steps from the threshold on; the demo patch keeps drafting."""
    env = {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8', 'LAB_STANDIN_ACCEPT_RATE': '0.9'}
    servers = {}
    for name, patch in (('demo', PATCH), ('declares', STOPS_PATCH)):
        python = patched_copy(pristine_sglang, tmp_path, name, patch)
        base, dummy, model = standins.start(*EAGLE3, python=python, env=env)
        servers[name] = json.loads(get(base + '/server_info')[1]), model
    demo_info, demo = servers['demo']
    info, declares = servers['declares']
    assert (demo_info['dynamic_spec_patch_present'], demo_info['dynamic_spec_patch_stops_drafting']) == (True, False)
    assert (info['dynamic_spec_patch_present'], info['dynamic_spec_patch_stops_drafting']) == (True, True)
    assert set(demo['draft_steps_by_batch_size'].values()) == {3}
    steps = declares['draft_steps_by_batch_size']
    assert [steps[size] for size in ('1', '7', '8', '16', '48')] == [3, 3, 0, 0, 0]
    # The knob reached both models: 1 + 0.9 + 0.81 + 0.729 tokens a step while drafting, 1 once it stopped.
    assert demo['accept_rate'] == declares['accept_rate'] == 0.9
    assert demo['accept_length_by_batch_size']['16'] == declares['accept_length_by_batch_size']['7'] == 3.439
    assert declares['accept_length_by_batch_size']['8'] == 1.0
    # Without draft passes a step costs less than the demo's drafting one.
    assert declares['step_time_s_by_batch_size']['16'] < demo['step_time_s_by_batch_size']['16']
    assert declares['step_time_s_by_batch_size']['7'] == demo['step_time_s_by_batch_size']['7']


def test_a_bad_model_knob_stops_the_start(standins):
    env = dict(os.environ, PYTHONPATH=standins.pythonpath, LAB_STANDIN_DRAFT_COST='-0.5')
    run = subprocess.run([sys.executable, '-m', standins.module, '--model-path', '/models/m', '--port',
                          str(free_port())], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip() == "error: LAB_STANDIN_DRAFT_COST must be a number of seconds >= 0, got '-0.5'"
