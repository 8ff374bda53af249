"""The role's preflight rules (roles/sglang/vars/main.yml, _sglang_variable_problems), evaluated by Ansible
itself with the role's defaults and vars on localhost: what is refused before anything on a host moves."""
import os

import pytest
import yaml

from helpers.ansible_run import REPO, run_task

ROLE = os.path.join(REPO, 'roles', 'sglang')
NEEDED = {'sglang_model_path': '/models/m', 'sglang_draft_model_path': '/models/draft'}
TIERS_WITHOUT_3 = {'1': {'candidate_steps': [1, 2]}, '8': {'candidate_steps': [0]}, 'ema_alpha': 0.3}


def problems(tmp_path, **overrides):
    task_vars = {}
    for name in ('defaults', 'vars'):
        with open(os.path.join(ROLE, name, 'main.yml')) as handle:
            task_vars.update(yaml.safe_load(handle))
    task_vars.update(NEEDED, **overrides)
    result = run_task(tmp_path, 'ansible.builtin.debug', {'var': '_sglang_variable_problems'},
                      keywords={'vars': task_vars})
    assert not result.failed, result
    return result['_sglang_variable_problems']


@pytest.mark.parametrize('overrides', [{}, {'sglang_dynamic_spec_mode': 'adaptive'},
                                        {'sglang_dynamic_spec_mode': 'adaptive', 'sglang_speculative_num_steps': 5,
                                         'sglang_speculative_num_draft_tokens': 6}],
                         ids=['env', 'adaptive', 'adaptive-5-steps'])
def test_consistent_settings_pass(tmp_path, overrides):
    assert problems(tmp_path, **overrides) == []


def test_adaptive_mode_wants_the_draft_tokens_sglang_derives(tmp_path):
    found = problems(tmp_path, sglang_dynamic_spec_mode='adaptive', sglang_speculative_num_steps=5)
    assert found == ['In adaptive mode SGLang (0.5.23) sets --speculative-num-draft-tokens to the draft steps + 1, '
                     'and /server_info would report that: set sglang_speculative_num_draft_tokens to 6.']


def test_adaptive_mode_wants_the_draft_steps_among_the_tiers_candidates(tmp_path):
    found = problems(tmp_path, sglang_dynamic_spec_mode='adaptive', sglang_dynamic_spec_adaptive_config=TIERS_WITHOUT_3)
    assert found == ['In adaptive mode SGLang (0.5.23) refuses to start unless sglang_speculative_num_steps (3) is '
                     'among the candidate steps of its tiers (0, 1, 2).']
    # The env mode never reads the tiers.
    assert problems(tmp_path, sglang_dynamic_spec_adaptive_config=TIERS_WITHOUT_3) == []


@pytest.mark.parametrize('patterns', [[], ['sglang::', '']], ids=['none', 'an-empty-one'])
def test_kill_patterns_that_would_match_nothing_or_everything_are_refused(tmp_path, patterns):
    # None: the container kill could never run (the stop would see no strays); '': every process would match.
    assert problems(tmp_path, sglang_kill_patterns=patterns) == [
        'sglang_kill_patterns must list at least one pattern, and no empty one (an empty pattern matches every process).']
