"""The lab stand-in reads --speculative-adaptive through the installed sglang release's own code.

Both real releases are installed (pip --no-deps); the stand-in's adaptive part runs in each one's
interpreter, as it does in the lab, and must give what that release's adaptive_spec_params.py gives.
"""
import json
import os
import subprocess

import pytest

from helpers.ansible_run import REPO

STANDIN = os.path.join(REPO, 'lab', 'standin')
RESOLVE = ('import json, sys\n'
           'from sglang_standin.adaptive import resolve_adaptive\n'
           'resolved = json.loads(sys.argv[1])\n'
           'report = resolve_adaptive(resolved)\n'
           'print(json.dumps({"report": report, "adaptive": resolved["speculative_adaptive"], "resolved": resolved}))\n')
# The tiers the role writes for threshold 8 with 3 draft steps (roles/sglang/vars/main.yml).
ROLE_TIERS = {'1': {'candidate_steps': [1, 3]}, '8': {'candidate_steps': [0]}}


def resolve(venv, tmp_path, config, **overrides):
    path = tmp_path / 'adaptive.json'
    path.write_text(json.dumps(config))
    resolved = {'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3, 'speculative_eagle_topk': 1,
                'speculative_num_draft_tokens': 4, 'speculative_adaptive': True,
                'speculative_adaptive_config': str(path), 'max_running_requests': 64}
    resolved.update(overrides)
    return subprocess.run([str(venv / 'bin' / 'python'), '-c', RESOLVE, json.dumps(resolved)],
                          env=dict(os.environ, PYTHONPATH=STANDIN), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


@pytest.mark.slow
def test_a_release_with_tiers_stops_drafting_from_the_threshold(native_sglang, tmp_path):
    venv, site = native_sglang
    run = resolve(venv, tmp_path, ROLE_TIERS)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    report = out['report']
    assert out['adaptive'] is True and report['tiers'] is True and report['disabled_reason'] is None
    assert report['parser'] == os.path.join(site, 'sglang', 'srt', 'speculative', 'adaptive_spec_params.py')
    assert report['sglang'] == '0.5.23'
    candidates = report['candidate_steps_by_batch_size']
    assert sorted(candidates, key=int) == [str(size) for size in range(1, 65)]
    assert all(candidates[str(size)] == [1, 3] for size in range(1, 8))
    assert all(candidates[str(size)] == [0] for size in range(8, 65))
    steps = report['initial_steps_by_batch_size']
    assert steps['1'] == 3 and steps['7'] == 3 and steps['8'] == 0 and steps['64'] == 0


def test_a_release_with_tiers_derives_the_draft_tokens_and_refuses_steps_outside_its_candidates(native_sglang,
                                                                                              tmp_path):
    venv, _ = native_sglang
    run = resolve(venv, tmp_path, ROLE_TIERS, speculative_num_draft_tokens=7)
    assert run.returncode == 0, run.stderr
    resolved = json.loads(run.stdout)['resolved']
    assert (resolved['speculative_num_steps'], resolved['speculative_num_draft_tokens']) == (3, 4)
    outside = resolve(venv, tmp_path, {'1': {'candidate_steps': [1, 2]}, '8': {'candidate_steps': [0]}})
    assert outside.returncode == 1 and outside.stdout == ''
    assert '--speculative-num-steps=3 is not in the adaptive config candidate_steps [0, 1, 2]' in outside.stderr


def test_the_release_s_own_defaults_apply_without_a_config_file(native_sglang, tmp_path):
    venv, _ = native_sglang
    run = resolve(venv, tmp_path, {}, speculative_adaptive_config=None)
    assert run.returncode == 0, run.stderr
    candidates = json.loads(run.stdout)['report']['candidate_steps_by_batch_size']
    # 0.5.23's DEFAULT_ADAPTIVE_CONFIG: {1: [1,3,5,7], 8: [0,1,3], 32: [0,1], 64: [0]}.
    assert (candidates['1'], candidates['8'], candidates['32'], candidates['64']) == (
        [1, 3, 5, 7], [0, 1, 3], [0, 1], [0])


def test_a_config_the_release_rejects_stops_the_start_with_its_message(native_sglang, tmp_path):
    venv, _ = native_sglang
    run = resolve(venv, tmp_path, {'candidate_steps': [1, 3]})
    assert run.returncode == 1 and run.stdout == ''
    assert 'must contain at least one integer-string BS key' in run.stderr
    # Not an object at all: the release's parser fails on it too, and the start stops with a message.
    listed = resolve(venv, tmp_path, [1, 3])
    assert listed.returncode == 1 and listed.stdout == ''
    assert 'error: --speculative-adaptive-config' in listed.stderr and 'Traceback' not in listed.stderr


def test_the_release_turns_adaptive_off_where_it_cannot_run(native_sglang, tmp_path):
    venv, _ = native_sglang
    run = resolve(venv, tmp_path, ROLE_TIERS, speculative_eagle_topk=2)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out['adaptive'] is False
    assert out['report']['disabled_reason'] == 'speculative_eagle_topk=2 (only topk=1 is supported)'
    assert 'speculative_adaptive disabled' in run.stderr


def test_the_patched_release_reads_one_flat_list_and_keeps_drafting_at_any_batch_size(pristine_sglang, tmp_path):
    # Why the role refuses adaptive mode on 0.5.12.post1: its parser ignores the tiers.
    venv, _ = pristine_sglang
    run = resolve(venv, tmp_path, ROLE_TIERS)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)['report']
    assert report['tiers'] is False and report['sglang'] == '0.5.12.post1'
    assert set(map(tuple, report['candidate_steps_by_batch_size'].values())) == {(1, 3, 7)}
    assert set(report['initial_steps_by_batch_size'].values()) == {3}


@pytest.mark.parametrize('fixture, expected', [('native_sglang', True), ('pristine_sglang', False)])
def test_the_modules_tier_check_agrees_with_the_release_s_parser(request, fixture, expected):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._patching import adaptive_tiers_supported
    _, site = request.getfixturevalue(fixture)
    assert adaptive_tiers_supported(site) is expected
