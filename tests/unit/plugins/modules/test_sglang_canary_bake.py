"""sglang_canary_bake through its main(), against servers on loopback that export SGLang's live figures: what each
served between the two readings, a baseline that exports none left out with its reason, a canary that restarted
or does not answer failing the bake's reading."""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers.module_runner import run_module  # noqa: F401  (the fixture)
from ansible_collections.gpuops.sglang.plugins.modules import sglang_canary_bake

FIGURES = '''sglang:num_requests_total{model_name="m",is_streaming="true"} %d
sglang:num_aborted_requests_total{model_name="m"} 0
sglang:inter_token_latency_seconds_bucket{model_name="m",le="0.01"} %d
sglang:inter_token_latency_seconds_bucket{model_name="m",le="+Inf"} %d
sglang:inter_token_latency_seconds_sum{model_name="m"} %r
sglang:inter_token_latency_seconds_count{model_name="m"} %d
'''


def no_commands(argv):
    raise AssertionError('the module ran a command: %r' % argv)


class Exporter(object):
    """A server whose /metrics grows by `step` requests (and 16 inter-token samples each) on every reading;
    `status` other than 200 answers that; `restart` sets the counters back to zero after the first reading;
    `replace` (old, new) rewrites every answer (a broken exporter)."""

    def __init__(self, step=5, status=200, restart=False, replace=('', '')):
        self.step, self.status, self.restart, self.readings = step, status, restart, 0
        self.replace = replace
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                exporter.readings += 1
                served = 0 if exporter.restart and exporter.readings > 1 else exporter.readings * exporter.step
                body = (FIGURES.replace(*exporter.replace) % (
                    served, served * 15, served * 16, served * 0.08, served * 16)).encode()
                self.send_response(exporter.status)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporters():
    started = []

    def start(**kwargs):
        started.append(Exporter(**kwargs))
        return started[-1]
    yield start
    for exporter in started:
        exporter.stop()


def test_what_each_server_served_between_the_two_readings(run_module, exporters):
    canary, old, bare = exporters(step=5), exporters(step=7), exporters(status=404)
    result, dummy = run_module(sglang_canary_bake.main, {
        'url': canary.url, 'baselines': {'gpu2': old.url, 'gpu3': bare.url}, 'seconds': 0.3}, no_commands)
    assert result['failed'] is False and result['measured'] is True, result
    assert result['canary']['requests'] == 5 and result['canary']['aborted'] == 0
    assert result['canary']['itl'] == {'bounds': [0.01, '+Inf'], 'counts': [75, 5], 'sum': pytest.approx(0.4)}
    assert list(result['baselines']) == ['gpu2'] and result['baselines']['gpu2']['requests'] == 7
    assert result['baseline_problems'] == {'gpu3': '%s exports no /metrics (started without --enable-metrics)' % bare.url}
    assert result['seconds'] >= 0.3 and result['changed'] is False
    assert 'the canary served 5 request(s), 1 baseline server(s) 7 request(s)' in result['msg']


def test_check_mode_reads_and_holds_nothing(run_module, exporters):
    canary = exporters()
    result, dummy = run_module(sglang_canary_bake.main, {'url': canary.url, 'seconds': 60}, no_commands,
                               check_mode=True)
    assert result['failed'] is False and result['measured'] is False and canary.readings == 0
    assert result['canary'] is None and result['baselines'] == {} and result['seconds'] == 0.0


@pytest.mark.parametrize('canary_kwargs, message', [
    ({'restart': True}, 'gave no figures the bake can judge: sglang:num_requests_total went down between the scrapes:'
                        ' the server restarted'),
    ({'status': 500}, 'did not give its live figures: '),
], ids=['restarted', 'broken'])
def test_a_canary_whose_figures_cannot_be_trusted_fails_the_reading(run_module, exporters, canary_kwargs, message):
    canary = exporters(**canary_kwargs)
    result, dummy = run_module(sglang_canary_bake.main, {'url': canary.url, 'seconds': 0.1}, no_commands)
    assert result['failed'] is True and message in result['msg'], result['msg']
    # The same keys on every run.
    assert set(result) >= {'measured', 'canary', 'baselines', 'baseline_problems', 'seconds', 'msg'}


@pytest.mark.parametrize('args, message', [
    ({'seconds': 0}, 'seconds must be greater than 0'),
    ({'seconds': 5, 'timeout': -1}, 'timeout must be greater than 0'),
], ids=['no-hold', 'bad-timeout'])
def test_bad_input_is_refused_before_anything_is_read(run_module, exporters, args, message):
    canary = exporters()
    result, dummy = run_module(sglang_canary_bake.main, dict(args, url=canary.url), no_commands)
    assert result['failed'] is True and message in result['msg'] and canary.readings == 0


NAN_BUCKET = ('le="0.01"} %d', 'le="0.01"} NaN %d')  # NaN, then the timestamp column the %d fills
NAN_COUNTER = ('is_streaming="true"} %d', 'is_streaming="true"} NaN %d')
NAN_MESSAGES = {
    'nan-buckets': 'sglang:inter_token_latency_seconds_bucket{le="0.01",model_name="m"} reads nan, not a finite number',
    'nan-counter': 'sglang:num_requests_total{is_streaming="true",model_name="m"} reads nan, not a finite number',
}


@pytest.mark.parametrize('replace', [NAN_BUCKET, NAN_COUNTER], ids=list(NAN_MESSAGES))
def test_a_canary_exporting_nan_fails_the_reading_naming_the_series(run_module, exporters, replace, request):
    canary = exporters(replace=replace)
    result, dummy = run_module(sglang_canary_bake.main, {'url': canary.url, 'seconds': 0.1}, no_commands)
    message = NAN_MESSAGES[request.node.callspec.id]
    assert result['failed'] is True and result['msg'] == 'the canary %s did not give its live figures: %s' % (
        canary.url, message) + ': the reading is refused (a broken exporter, or not SGLang answering there; look at its' \
        ' /metrics)', result['msg']
    assert 'Traceback' not in str(result) and result['measured'] is False and result['canary'] is None
    assert set(result) >= {'measured', 'canary', 'baselines', 'baseline_problems', 'seconds', 'msg'}


@pytest.mark.parametrize('replace', [NAN_BUCKET, NAN_COUNTER], ids=list(NAN_MESSAGES))
def test_a_baseline_exporting_nan_is_left_out_with_its_reason(run_module, exporters, replace, request):
    canary, broken = exporters(), exporters(replace=replace)
    result, dummy = run_module(sglang_canary_bake.main, {
        'url': canary.url, 'baselines': {'gpu2': broken.url}, 'seconds': 0.1}, no_commands)
    assert result['failed'] is False and result['baselines'] == {}, result
    assert NAN_MESSAGES[request.node.callspec.id] in result['baseline_problems']['gpu2']


# Two ranks each exporting 1e308: every sample finite, their sum infinite (and infinity less infinity NaN).
OVERFLOWING_RANKS = ('is_streaming="true"} %d',
                     'tp_rank="0"} 1e308 %d\nsglang:num_requests_total{model_name="m",tp_rank="1"} 1e308')
OVERFLOW_MESSAGE = ('sglang:num_requests_total sums over its label sets to inf, not a finite number: the reading is'
                    ' refused (a broken exporter, or not SGLang answering there; look at its /metrics)')


def test_a_canary_whose_finite_samples_sum_past_a_float_fails_the_reading_naming_the_series(run_module, exporters):
    canary = exporters(replace=OVERFLOWING_RANKS)
    result, dummy = run_module(sglang_canary_bake.main, {'url': canary.url, 'seconds': 0.1}, no_commands)
    assert result['failed'] is True and result['msg'] == 'the canary %s did not give its live figures: %s' % (
        canary.url, OVERFLOW_MESSAGE), result['msg']
    assert 'Traceback' not in str(result) and result['measured'] is False and result['canary'] is None


def test_a_baseline_whose_finite_samples_sum_past_a_float_is_left_out_with_its_reason(run_module, exporters):
    canary, broken = exporters(), exporters(replace=OVERFLOWING_RANKS)
    result, dummy = run_module(sglang_canary_bake.main, {
        'url': canary.url, 'baselines': {'gpu2': broken.url}, 'seconds': 0.1}, no_commands)
    assert result['failed'] is False and result['baselines'] == {}, result
    assert result['baseline_problems'] == {'gpu2': OVERFLOW_MESSAGE}
    assert result['canary']['requests'] == 5


@pytest.mark.parametrize('after', [1e12, float('nan')], ids=['1e12', 'nan'])
def test_a_hand_over_longer_than_a_guard_may_hold_a_host_fails_the_bake_before_it_reads(run_module, exporters,
                                                                                        tmp_path, after):
    guard = tmp_path / 'guard'
    guard.mkdir()
    (guard / 'state.json').write_text('{"run_id": "run-1", "armed_at": 1.0, "deadline": 9e10, "idle": 90}')
    canary = exporters()
    result, dummy = run_module(sglang_canary_bake.main, {
        'url': canary.url, 'seconds': 0.1, 'guard': {'folder': str(guard), 'run_id': 'run-1', 'after': after}},
        no_commands)
    assert result['failed'] is True and canary.readings == 0 and not (guard / 'lease.json').exists()
    assert result['msg'].startswith('after (%g s) must be from 0 to 172800 s (the longest a rollback guard may keep a'
                                    ' host off its previous server): the guard option of sglang_canary_bake (run'
                                    ' run-1 in %s) is refused; nothing was renewed' % (after, guard)), result['msg']
