"""The speculation tuner's recommendation on recorded tables: where plain decoding catches EAGLE-3, which step count
each batch-size tier gets, and what the vars file that applies it says."""
import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _speculation

MODES = _speculation.modes(3)
WITH_STEPS = _speculation.modes(3, [1, 3, 5])


def levels(**throughput):
    """{mode: [tok/s per level]} over the levels 1, 2, 4, 8, 16 -> the table (None: that level timed out)."""
    measured = {}
    for name, values in throughput.items():
        measured[name] = [{'concurrency': c, 'output_tok_s': value, 'itl_p95_s': 0.01, 'ttft_p95_s': 0.1,
                           'timed_out': value is None} for c, value in zip((1, 2, 4, 8, 16), values)]
    return _speculation.table(measured)


@pytest.mark.parametrize('table, threshold, tiers, notes', [
    # The lab's default model: EAGLE-3 ahead at 1 and 2, plain from 4 on.
    (levels(plain=[90, 170, 320, 560, 700], eagle3=[140, 230, 300, 350, 354]), 4,
     {'1': {'candidate_steps': [3]}, '4': {'candidate_steps': [0]}}, []),
    # No crossover at all: drafting always pays.
    (levels(plain=[90, 170, 300, 500, 600], eagle3=[180, 320, 560, 900, 1100]), None,
     {'1': {'candidate_steps': [3]}}, ['EAGLE-3 was ahead at every measured level']),
    # Crossover at the first level: drafting never pays, nothing to tier.
    (levels(plain=[100, 190, 350, 600, 760], eagle3=[95, 150, 250, 330, 350]), 1, None,
     ['plain decoding was ahead at every measured level']),
    # A tie counts for plain decoding (at least EAGLE-3's).
    (levels(plain=[90, 200, 320, 560, 700], eagle3=[140, 200, 300, 350, 354]), 2,
     {'1': {'candidate_steps': [3]}, '2': {'candidate_steps': [0]}}, []),
    # Noisy: EAGLE-3 ahead again at 8 above the first crossing; the first crossing stands, and is noted.
    (levels(plain=[90, 170, 320, 340, 700], eagle3=[140, 230, 300, 360, 354]), 4,
     {'1': {'candidate_steps': [3]}, '4': {'candidate_steps': [0]}, '8': {'candidate_steps': [3]},
      '16': {'candidate_steps': [0]}},
     ['concurrency 8: EAGLE-3 ahead again (360.0 against 340.0 tok/s) above the threshold 4']),
    # A level that timed out in one mode: the mode that served it is ahead there, and the note says so.
    (levels(plain=[90, 170, None, 560, 700], eagle3=[140, 230, 300, 350, 354]), 8,
     {'1': {'candidate_steps': [3]}, '8': {'candidate_steps': [0]}},
     ['concurrency 4: only EAGLE-3 served every request in time: counted as ahead']),
    (levels(plain=[90, 170, 320, 560, 700], eagle3=[140, 230, None, None, 354]), 4,
     {'1': {'candidate_steps': [3]}, '4': {'candidate_steps': [0]}},
     ['concurrency 4: only plain decoding served', 'concurrency 8: only plain decoding served']),
    # Neither served a level: not compared.
    (levels(plain=[90, None, 320, 560, 700], eagle3=[140, None, 300, 350, 354]), 4,
     {'1': {'candidate_steps': [3]}, '4': {'candidate_steps': [0]}},
     ['concurrency 2: neither plain decoding nor EAGLE-3 served every request in time']),
], ids=['lab-default', 'no-crossover', 'first-level', 'tie', 'noisy', 'timed-out', 'eagle3-timed-out',
        'both-timed-out'])
def test_the_threshold_is_the_first_level_where_plain_decoding_catches_eagle3(table, threshold, tiers, notes):
    found = _speculation.recommend(table, MODES)
    assert found['threshold'] == threshold
    assert found['adaptive_config'] == tiers
    assert len(found['notes']) == len(notes)
    for expected, note in zip(notes, found['notes']):
        assert note.startswith(expected), note


def test_each_tier_gets_the_step_count_that_measured_best_from_its_batch_size_on():
    table = levels(plain=[90, 170, 320, 560, 700], eagle3=[140, 230, 300, 350, 354],
                   eagle3_steps_1=[120, 215, 330, 480, 520], eagle3_steps_5=[150, 220, 260, 300, 310])
    found = _speculation.recommend(table, WITH_STEPS)
    assert [row['mode'] for row in found['best']] == ['eagle3_steps_5', 'eagle3', 'eagle3_steps_1', 'plain', 'plain']
    assert found['adaptive_config'] == {'1': {'candidate_steps': [5]}, '2': {'candidate_steps': [3]},
                                        '4': {'candidate_steps': [1]}, '8': {'candidate_steps': [0]}}
    # The threshold compares plain decoding with the configured steps only (320 >= 300 at 4), whatever the others.
    assert found['threshold'] == 4 and found['num_steps'] == 3


def test_a_level_with_failed_requests_is_no_measurement():
    measured = {'plain': [{'concurrency': 1, 'output_tok_s': 90, 'requests': 8, 'completed': 8, 'errors': 0},
                          {'concurrency': 2, 'output_tok_s': 170, 'requests': 8, 'completed': 8, 'errors': 0}],
                'eagle3': [{'concurrency': 1, 'output_tok_s': 140, 'requests': 8, 'completed': 8, 'errors': 0},
                           # Out of memory at 2: every request failed, 0 tok/s.
                           {'concurrency': 2, 'output_tok_s': 0.0, 'requests': 8, 'completed': 0, 'errors': 8}]}
    table = _speculation.table(measured)
    assert table[1]['eagle3'] is None
    found = _speculation.recommend(table, MODES)
    assert found['threshold'] == 2 and found['notes'] == [
        'concurrency 2: only plain decoding served every request in time: counted as ahead']


def test_nothing_compared_says_so():
    found = _speculation.recommend(levels(plain=[None] * 5, eagle3=[None] * 5), MODES)
    assert found['compared'] == 0 and found['threshold'] is None and found['adaptive_config'] is None


def test_tiers_without_the_configured_steps_bring_their_own_and_the_vars_file_says_so():
    table = levels(plain=[90, 170, 320, 560, 700], eagle3=[100, 150, 300, 350, 354],
                   eagle3_steps_1=[120, 215, 310, 480, 520], eagle3_steps_5=[150, 160, 260, 300, 310])
    found = _speculation.recommend(table, WITH_STEPS)
    assert found['threshold'] == 2
    assert found['adaptive_config'] == {'1': {'candidate_steps': [5]}, '2': {'candidate_steps': [1]},
                                        '4': {'candidate_steps': [0]}}
    assert found['num_steps'] == 5
    # Adaptive mode: the tiers with the steps they need.
    assert _speculation.vars_for(found, 3, 4, 'adaptive') == {
        'sglang_dynamic_spec_enabled': True, 'sglang_dynamic_spec_adaptive_config': found['adaptive_config'],
        'sglang_speculative_num_steps': 5, 'sglang_speculative_num_draft_tokens': 6}
    # Env mode: the threshold, at the steps it was measured with.
    assert _speculation.vars_for(found, 3, 4, 'env') == {
        'sglang_dynamic_spec_enabled': True, 'sglang_dynamic_spec_batch_size_threshold': 2,
        'sglang_speculative_num_steps': 3, 'sglang_speculative_num_draft_tokens': 4}


TIERS = {'1': {'candidate_steps': [3]}, '4': {'candidate_steps': [0]}}
STEPS = {'sglang_speculative_num_steps': 3, 'sglang_speculative_num_draft_tokens': 4}


@pytest.mark.parametrize('recommended, mode, expected', [
    ({'threshold': 4, 'adaptive_config': TIERS, 'num_steps': 3, 'never_draft': False}, 'env',
     dict(STEPS, sglang_dynamic_spec_enabled=True, sglang_dynamic_spec_batch_size_threshold=4)),
    ({'threshold': 4, 'adaptive_config': TIERS, 'num_steps': 3, 'never_draft': False}, 'adaptive',
     dict(STEPS, sglang_dynamic_spec_enabled=True, sglang_dynamic_spec_adaptive_config=TIERS)),
    ({'threshold': None, 'adaptive_config': {'1': {'candidate_steps': [3]}}, 'num_steps': 3, 'never_draft': False},
     'env', dict(STEPS, sglang_dynamic_spec_enabled=False)),
    # Drafting at every batch size in adaptive mode too: one tier of the configured steps.
    ({'threshold': None, 'adaptive_config': {'1': {'candidate_steps': [3]}}, 'num_steps': 3, 'never_draft': False},
     'adaptive', dict(STEPS, sglang_dynamic_spec_enabled=True,
                      sglang_dynamic_spec_adaptive_config={'1': {'candidate_steps': [3]}})),
    # Plain decoding ahead everywhere: no speculation at all, whatever the mode.
    ({'threshold': 1, 'adaptive_config': None, 'num_steps': None, 'never_draft': True}, 'env',
     {'sglang_speculative_algorithm': ''}),
    ({'threshold': 1, 'adaptive_config': None, 'num_steps': None, 'never_draft': True}, 'adaptive',
     {'sglang_speculative_algorithm': ''}),
], ids=['env-threshold', 'adaptive-tiers', 'env-never-stop', 'adaptive-never-stop', 'env-never-draft',
        'adaptive-never-draft'])
def test_the_vars_that_apply_a_recommendation(recommended, mode, expected):
    assert _speculation.vars_for(recommended, 3, 4, mode) == expected


def test_modes_are_plain_the_configured_steps_then_each_other_candidate():
    assert [mode['name'] for mode in _speculation.modes(3, [5, 1, 3, 0, 1])] == [
        'plain', 'eagle3', 'eagle3_steps_1', 'eagle3_steps_5']


@pytest.mark.parametrize('mode, expected', [
    ({'name': 'plain', 'steps': 0}, ('', 3, 4)),
    ({'name': 'eagle3', 'steps': 3}, ('EAGLE3', 3, 4)),
    ({'name': 'eagle3_steps_5', 'steps': 5}, ('EAGLE3', 5, 6)),
])
def test_each_mode_runs_with_its_own_speculation_settings(mode, expected):
    settings = {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': 3,
                'sglang_speculative_num_draft_tokens': 4}
    found = _speculation.mode_settings(mode, settings)
    assert (found['sglang_speculative_algorithm'], found['sglang_speculative_num_steps'],
            found['sglang_speculative_num_draft_tokens']) == expected


@pytest.mark.parametrize('mode, read, found', [
    # As planned: the mode's own settings, drafting off at every batch size.
    ({'name': 'plain', 'settings': {'sglang_speculative_algorithm': '', 'sglang_speculative_num_steps': 3}},
     {'sglang_speculative_algorithm': '', 'sglang_speculative_num_steps': 3, 'sglang_dynamic_spec_enabled': False}, ''),
    # Read back as text (a rendered variable): the same.
    ({'name': 'eagle3', 'settings': {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': 3}},
     {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': '3', 'sglang_dynamic_spec_enabled': 'false'},
     ''),
    # -e sglang_speculative_algorithm=EAGLE3 would measure EAGLE-3 as plain decoding.
    ({'name': 'plain', 'settings': {'sglang_speculative_algorithm': '', 'sglang_speculative_num_steps': 3}},
     {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': 3, 'sglang_dynamic_spec_enabled': False},
     'cannot measure the mode plain: sglang_speculative_algorithm is given as extra variables'),
    ({'name': 'eagle3_steps_5', 'settings': {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': 5}},
     {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_speculative_num_steps': 3, 'sglang_dynamic_spec_enabled': True},
     'sglang_speculative_num_steps, sglang_dynamic_spec_enabled are given as extra variables'),
], ids=['as-planned', 'as-text', 'algorithm-overridden', 'steps-and-dynamic-overridden'])
def test_a_mode_whose_settings_an_extra_variable_overrode_is_refused(mode, read, found):
    message = _speculation.overridden(mode, read)
    assert (message == '') if not found else (found in message), message


SETTINGS = {'sglang_speculative_algorithm': 'EAGLE3', 'sglang_server_group': '', 'sglang_report_dir': '/tmp/r',
            'sglang_tune_levels': [1, 2, 4], 'sglang_tune_requests': 8, 'sglang_tune_steps': [],
            'sglang_speculative_eagle_topk': 1, 'sglang_tune_max_new_tokens': 16, 'sglang_tune_timeout': 60}


@pytest.mark.parametrize('change, problem', [
    ({}, None),
    ({'sglang_speculative_algorithm': ''}, 'the server does not draft'),
    ({'sglang_server_group': 'big'}, 'server group big'),
    ({'sglang_report_dir': ''}, 'sglang_report_dir is empty'),
    ({'sglang_tune_levels': []}, 'sglang_tune_levels must be'),
    ({'sglang_tune_levels': [1, 0]}, 'sglang_tune_levels must be'),
    ({'sglang_tune_requests': 2}, 'sglang_tune_requests (2) must be at least the highest level (4)'),
    ({'sglang_tune_steps': [0]}, 'sglang_tune_steps must be'),
    ({'sglang_tune_steps': [2], 'sglang_speculative_eagle_topk': 4}, 'needs sglang_speculative_eagle_topk 1'),
    ({'sglang_tune_max_new_tokens': 0}, 'sglang_tune_max_new_tokens must be above 0'),
    ({'sglang_tune_timeout': 0}, 'sglang_tune_timeout must be above 0'),
], ids=['fine', 'no-drafting', 'group', 'no-report-dir', 'no-levels', 'zero-level', 'few-requests', 'zero-steps',
        'topk', 'no-tokens', 'no-timeout'])
def test_what_a_tuning_run_refuses(change, problem):
    found = _speculation.problems(dict(SETTINGS, **change))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found


def test_the_table_as_text_marks_the_best_mode_per_level():
    table = levels(plain=[90, 170, 320, 560, 700], eagle3=[140, 230, 300, 350, 354])
    text = _speculation.lines(table, MODES, _speculation.recommend(table, MODES))
    assert text[1].split() == ['1', '90.0', '140.0*'] and text[3].split() == ['4', '320.0*', '300.0']
    assert text[-1].endswith('threshold: 4')


@pytest.mark.parametrize('armed, fired, in_router, said', [
    (False, None, True, 'Nothing was stopped (the guard was not armed).'),
    (True, None, True, 'The guard has not restored the previous server: playbooks/rollback.yml --limit gpu2 does.'),
    (True, {'status': 'rolled_back', 'router_readmitted': True}, True,
     'The guard restored the previous server (healthy, back in the router).'),
    (True, {'status': 'rolled_back', 'router_readmitted': None}, False, 'The guard restored the previous server (healthy).'),
    # Healthy, but left out of the router it was in: not restored.
    (True, {'status': 'rolled_back', 'router_readmitted': False, 'router_problem': 'the router answered 503'}, True,
     'The guard could not restore the previous server fully (rolled_back, the router answered 503): '
     'playbooks/rollback.yml --limit gpu2 finishes it.'),
    (True, {'status': 'failed'}, False,
     'The guard could not restore the previous server fully (failed): playbooks/rollback.yml --limit gpu2 finishes it.'),
], ids=['never-armed', 'not-restored', 'restored-readmitted', 'restored-no-router', 'out-of-router', 'failed'])
def test_what_a_stopped_tuning_run_says_of_its_host(armed, fired, in_router, said):
    assert _speculation.restore_outcome('gpu2', armed, fired, in_router) == said
