"""The stand-in's decode model knobs (lab/standin/sglang_standin/decode.py) and env mode under a patch that
declares it stops drafting (launch_server.sglang_patch_stops_drafting).

LAB_STANDIN_ACCEPT_RATE and LAB_STANDIN_DRAFT_COST move the crossover: the smallest batch at which plain
decoding's tokens/s reaches EAGLE-3's (3 draft steps, its batch capped at 48 as SGLang caps it with
speculation), computed from the model's own step_time and accept_length, never from timing.
"""
import os
import sys

import pytest

from helpers.ansible_run import REPO

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'standin'))
from sglang_standin import decode, launch_server  # noqa: E402  (the stand-in is not an installed package)

DEMO_PATCH = os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff')
STOPS_PATCH = os.path.join(REPO, 'tests', 'fixtures', 'patches', 'eagle_dynamic_spec_stops_drafting.diff')
EAGLE3 = {'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3, 'max_running_requests': 48}
SPECULATIVE_CAP = 48


def crossover(accept_rate=decode.ACCEPT_RATE, draft_cost=decode.DRAFT_COST, steps=3):
    """The smallest batch size at which plain decoding's tokens/s is at least EAGLE-3's."""
    for size in range(1, 257):
        plain = size / decode.step_time(size, 0, draft_cost=draft_cost)
        eagle_batch = min(size, SPECULATIVE_CAP)
        eagle = (eagle_batch * decode.accept_length(steps, accept_rate)
                 / decode.step_time(eagle_batch, steps, draft_cost=draft_cost))
        if plain >= eagle:
            return size
    return None


@pytest.mark.parametrize('accept_rate, batch', [(0.6, 2), (0.77, 4), (0.9, 6)])
def test_the_acceptance_rate_moves_the_crossover(accept_rate, batch):
    assert crossover(accept_rate) == batch


def test_a_higher_acceptance_rate_or_a_cheaper_draft_keeps_eagle_ahead_longer():
    rates = [0.5, 0.6, 0.7, 0.77, 0.8, 0.9, 0.95]
    crossings = [crossover(rate) for rate in rates]
    assert crossings == sorted(crossings) and crossings[0] < crossings[-1]
    assert crossover(draft_cost=0.0) == 12 > crossover() == 4
    assert crossover(draft_cost=2 * decode.DRAFT_COST) < crossover()


def test_the_defaults_are_the_model_as_it_was():
    """No knob set: the constants, and the shape the module's docstring gives."""
    assert decode.model_knobs({}) == (decode.ACCEPT_RATE, decode.DRAFT_COST) == (0.77, 0.00103)
    assert decode.model_knobs({'LAB_STANDIN_ACCEPT_RATE': '', 'LAB_STANDIN_DRAFT_COST': ' '}) == (0.77, 0.00103)
    assert decode.accept_length(3) == decode.accept_length(3, 0.77) == pytest.approx(2.8194, abs=1e-4)
    assert decode.step_time(48, 3) == decode.step_time(48, 3, 0, 1.0, 0.00103)
    assert 48 * decode.accept_length(3) / decode.step_time(48, 3) == pytest.approx(356.6, abs=0.1)
    assert 64 / decode.step_time(64, 0) == pytest.approx(771.5, abs=0.1)


def test_the_knobs_are_read_from_the_environment():
    assert decode.model_knobs({'LAB_STANDIN_ACCEPT_RATE': '0.9', 'LAB_STANDIN_DRAFT_COST': '0'}) == (0.9, 0.0)
    assert decode.model_knobs({'LAB_STANDIN_DRAFT_COST': '0.002'}) == (0.77, 0.002)


@pytest.mark.parametrize('name, value', [
    ('LAB_STANDIN_ACCEPT_RATE', '0'), ('LAB_STANDIN_ACCEPT_RATE', '1'), ('LAB_STANDIN_ACCEPT_RATE', '1.5'),
    ('LAB_STANDIN_ACCEPT_RATE', '-0.2'), ('LAB_STANDIN_ACCEPT_RATE', 'nan'), ('LAB_STANDIN_ACCEPT_RATE', 'high'),
    ('LAB_STANDIN_DRAFT_COST', '-0.001'), ('LAB_STANDIN_DRAFT_COST', 'inf'), ('LAB_STANDIN_DRAFT_COST', 'nan'),
    ('LAB_STANDIN_DRAFT_COST', '1ms'),
])
def test_a_bad_knob_is_refused_naming_it(name, value):
    with pytest.raises(ValueError, match='^%s must be ' % name):
        decode.model_knobs({name: value})


def test_a_bad_knob_stops_the_server_before_it_starts(monkeypatch):
    monkeypatch.delenv(launch_server.PATCH_ENV, raising=False)
    monkeypatch.setenv('LAB_STANDIN_ACCEPT_RATE', '1')
    with pytest.raises(SystemExit) as stopped:
        launch_server.main(['--model-path', '/models/m'])
    assert str(stopped.value.code) == ("error: LAB_STANDIN_ACCEPT_RATE must be a number between 0 and 1, exclusive, "
                                       "got '1'")
    monkeypatch.setenv('LAB_STANDIN_ACCEPT_RATE', '0.8')
    monkeypatch.setenv('LAB_STANDIN_DRAFT_COST', '-1')
    with pytest.raises(SystemExit) as stopped:
        launch_server.main(['--model-path', '/models/m'])
    assert str(stopped.value.code) == "error: LAB_STANDIN_DRAFT_COST must be a number of seconds >= 0, got '-1'"


def test_the_scheduler_runs_and_reports_the_knobs_it_was_given():
    slept = []
    scheduler = decode.Scheduler({1: 3}, 4, True, sleep=slept.append, accept_rate=0.9, draft_cost=0.0)
    request = scheduler.submit(100)
    assert scheduler.step()
    assert slept == [decode.step_time(1, 3, 1, 1.0, 0.0)] and slept[0] < decode.step_time(1, 3, 1)
    assert request.produced == 3 and request.credit == pytest.approx(1 + 0.9 + 0.81 + 0.729)
    report = decode.decode_report(scheduler, up_to=2)
    assert (report['accept_rate'], report['draft_cost']) == (0.9, 0.0)
    assert report['accept_length_by_batch_size']['1'] == 3.439
    assert report['step_time_s_by_batch_size']['2'] == round(decode.step_time(2, 3, 0, 1.0, 0.0), 6)


def test_scheduler_for_threads_the_environment_s_knobs_through():
    scheduler = decode.scheduler_for(EAGLE3, None, {'LAB_STANDIN_ACCEPT_RATE': '0.6', 'LAB_STANDIN_DRAFT_COST': '0.002'})
    scheduler.stop()
    assert (scheduler.accept_rate, scheduler.draft_cost) == (0.6, 0.002)
    default = decode.scheduler_for(EAGLE3, None, {})
    default.stop()
    assert (default.accept_rate, default.draft_cost) == (0.77, 0.00103)
    assert decode.decode_report(default) == dict(decode.decode_report(default), accept_rate=0.77, draft_cost=0.00103)


def test_draft_steps_stop_from_the_batch_size_given():
    steps = decode.draft_steps_by_batch_size(EAGLE3, None, 48, stop_drafting_from=8)
    assert [steps[size] for size in (1, 7, 8, 9, 48)] == [3, 3, 0, 0, 0]
    for never in (None, 0):
        assert set(decode.draft_steps_by_batch_size(EAGLE3, None, 48, never).values()) == {3}
    assert set(decode.draft_steps_by_batch_size({}, None, 48, 8).values()) == {0}
    # adaptive.py's report: the steps the release's parser chose, for every batch size up to its largest tier.
    adaptive = {'initial_steps_by_batch_size': dict((str(size), 1 if size < 4 else 3) for size in range(1, 33))}
    routed = decode.draft_steps_by_batch_size(dict(EAGLE3, speculative_adaptive=True), adaptive, 48, 16)
    assert [routed[size] for size in (1, 3, 4, 15, 16)] == [1, 1, 3, 3, 0]


def added_lines(path):
    """The lines a unified diff adds (the '+' lines of its hunks, without the '+')."""
    with open(path) as handle:
        return [line[1:] for line in handle.read().splitlines() if line.startswith('+') and not line.startswith('+++')]


def test_the_fixture_patch_is_the_demo_patch_plus_the_declaration():
    demo, fixture = added_lines(DEMO_PATCH), added_lines(STOPS_PATCH)
    assert launch_server.STOPS_DRAFTING_DECLARATION not in demo
    extra = [line for line in fixture if line not in demo]
    assert extra[-1] == launch_server.STOPS_DRAFTING_DECLARATION == 'DYNAMIC_SPEC_STOPS_DRAFTING = True'
    assert all(line.startswith('#') for line in extra[:-1])
    assert [line for line in fixture if line in demo] == demo
    with open(STOPS_PATCH) as handle:
        header = handle.read().split('\n--- ', 1)[0]
    assert header.startswith('# TEST FIXTURE: not a real implementation of stopping drafting in SGLang.')


@pytest.fixture
def installed_worker(tmp_path, monkeypatch):
    """Write the eagle_worker.py of a fake installed sglang, found first on sys.path."""
    speculative = tmp_path / 'sglang' / 'srt' / 'speculative'
    speculative.mkdir(parents=True)
    (tmp_path / 'sglang' / '__init__.py').write_text('')
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(text):
        (speculative / 'eagle_worker.py').write_text(text)
    return write


@pytest.mark.parametrize('patch, stops', [(DEMO_PATCH, False), (STOPS_PATCH, True)])
def test_only_a_patch_that_declares_it_stops_drafting(installed_worker, patch, stops):
    installed_worker('import logging\n\n' + '\n'.join(added_lines(patch)) + '\n')
    assert launch_server.sglang_carries_patch() is True
    assert launch_server.sglang_patch_stops_drafting() is stops


PATCH_VARIABLE = 'DYNAMIC_SPEC_DISABLE_ENV = "SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE"\n'


@pytest.mark.parametrize('text, stops', [
    (PATCH_VARIABLE + 'DYNAMIC_SPEC_STOPS_DRAFTING = True  # it does\n', True),
    (PATCH_VARIABLE + 'DYNAMIC_SPEC_STOPS_DRAFTING = False\n', False),
    (PATCH_VARIABLE + '# DYNAMIC_SPEC_STOPS_DRAFTING = True\n', False),
    (PATCH_VARIABLE + 'class W:\n    DYNAMIC_SPEC_STOPS_DRAFTING = True\n', False),
    (PATCH_VARIABLE + 'X = "DYNAMIC_SPEC_STOPS_DRAFTING = True"\n', False),
    ('DYNAMIC_SPEC_STOPS_DRAFTING = True\n', False),  # a declaration without the patch declares nothing
])
def test_the_declaration_is_a_module_level_line_beside_the_patch(installed_worker, text, stops):
    installed_worker(text)
    assert launch_server.sglang_patch_stops_drafting() is stops


def test_without_sglang_nothing_is_declared():
    assert launch_server.installed_eagle_worker() is None
    assert launch_server.sglang_carries_patch() is False and launch_server.sglang_patch_stops_drafting() is False


@pytest.mark.parametrize('resolved, environ, stops_drafting, stop_from', [
    (EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8'}, True, 8),
    (EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': ' 16 '}, True, 16),
    (EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8'}, False, None),  # the demo patch: it keeps drafting
    (EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '0'}, True, None),  # 0: upstream behaviour
    (EAGLE3, {}, True, None),
    ({'max_running_requests': 48}, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': 'x'}, True, None),  # no EAGLE worker
    (EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': 'x'}, False, None),
])
def test_env_mode_stops_drafting_only_where_the_installed_patch_declares_it(resolved, environ, stops_drafting,
                                                                          stop_from):
    assert launch_server.stop_drafting_from(resolved, environ, stops_drafting) == stop_from
    steps = decode.draft_steps_by_batch_size(resolved, None, 48, stop_from)
    drafting = 3 if resolved.get('speculative_algorithm') else 0
    assert steps[7] == drafting and steps[48] == (0 if stop_from else drafting)


@pytest.mark.parametrize('value', ['-1', 'eight', '8.5'])
def test_a_threshold_the_patch_refuses_is_refused_where_it_stops_drafting(value):
    with pytest.raises(ValueError, match='^SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE must be an integer >= 0'):
        launch_server.stop_drafting_from(EAGLE3, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': value}, True)


def test_a_server_under_a_declaring_patch_says_so_and_stops_drafting(installed_worker, monkeypatch):
    installed_worker('import logging\n\n' + '\n'.join(added_lines(STOPS_PATCH)) + '\n')
    monkeypatch.setenv('SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE', '8')
    monkeypatch.setenv('LAB_STANDIN_WARMUP', '0')
    resolved = launch_server.resolve(launch_server.build_parser().parse_args(
        ['--model-path', '/models/m', '--speculative-algorithm', 'EAGLE3', '--speculative-draft-model-path', '/d']))
    server = launch_server.Server(resolved, stops_drafting=launch_server.sglang_patch_stops_drafting())
    server.scheduler.stop()
    info = server.info()
    assert (info['dynamic_spec_patch_present'], info['dynamic_spec_patch_stops_drafting']) == (True, True)
    model = info['internal_states'][0]['standin_decode']
    assert [model['draft_steps_by_batch_size'][size] for size in ('1', '7', '8', '48')] == [3, 3, 0, 0]
    assert model['accept_length_by_batch_size']['8'] == 1.0
