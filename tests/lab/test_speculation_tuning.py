"""The speculation tuner (playbooks/tune_speculation.yml) on the lab's gpu2: its server measured in plain decoding
and EAGLE-3 over concurrency levels, out of the router, then restored; the recommendation written beside the
reports, and applied with the command the tuner prints.

The stand-in's decode model (lab/standin/sglang_standin/decode.py) is what is measured: with its default draft
acceptance (0.77) plain decoding catches EAGLE-3 between a batch of 3 and 4; LAB_STANDIN_ACCEPT_RATE moves the
crossover (0.6: between 1 and 2; 0.95: between 7 and 8). Assertions about where the threshold falls use the
model's margins at the levels around it (20% and more), never a level where the two modes are within a few
percent of each other, since the lab's machine is shared with the rest of the suite.
"""
import json
import os
import re
import subprocess
import urllib.request

import pytest

from helpers import lab_instance
from helpers.ansible_run import REPO, run_playbook
from helpers.doc_blocks import recap, user_shell_env

ROUTER = lab_instance.router_url()
# The lab's second release, with batch-size tiers (test_redeploy_scenarios.py serves it the same way).
NATIVE_PYTHON = '/opt/sglang-native/venv/bin/python'
# Short levels (16 requests of 32 tokens): a tuning run takes about 45 s on the lab.
TUNE = {'sglang_tune_levels': [1, 2, 4, 8, 16], 'sglang_tune_requests': 16, 'sglang_tune_max_new_tokens': 32,
        'sglang_tune_timeout': 60}
# The performance gate with test_performance_gate.py's short levels and wide tolerances.
GATE = {'sglang_perf_requests': 16, 'sglang_perf_max_new_tokens': 16, 'sglang_perf_timeout': 30,
        'sglang_perf_throughput_tolerance': 0.5, 'sglang_perf_itl_tolerance': 1.0}


def tune(tmp_path, name, extravars=None, limit='gpu2'):
    return run_playbook(tmp_path, 'playbooks/tune_speculation.yml', lab_instance.inventory(),
                        dict(TUNE, **(extravars or {})), name=name, limit=limit)


def table():
    with open(os.path.join(lab_instance.reports_dir(), 'gpu2.speculation.json')) as handle:
        return json.load(handle)


def table_if_any():
    """gpu2's last table, or None before its first tuning (this test run alone)."""
    return table() if os.path.exists(os.path.join(lab_instance.reports_dir(), 'gpu2.speculation.json')) else None


def router_urls():
    with urllib.request.urlopen(ROUTER + '/workers', timeout=10) as response:
        return sorted(worker['url'] for worker in json.load(response)['workers'])


def served(host):
    """What gpu2 serves, as a later redeploy would compare it: its launch configuration and what it reports."""
    info = host.server_info()
    return (host.sha256('/etc/sglang/launch.json'), info['speculative_algorithm'],
            info['environment'].get('SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'))


def demo_after_the_lab_is_up(limit):
    """The commands `make demo` runs once its lab is up (its redeploy, here of `limit` only, then `lab/lab summary`),
    as the Makefile writes them, for this test's lab."""
    with open(os.path.join(REPO, 'Makefile')) as handle:
        recipe = re.search(r'^demo: .*\n((?:\t.*\n)+)', handle.read(), re.M).group(1)
    lines = [line.strip() for line in recipe.splitlines()]
    assert lines[0].endswith('lab/lab up') and 'playbooks/redeploy.yml' in lines[1], lines
    lines[1] += ' --limit %s' % limit
    text = '\n'.join(lines[1:]).replace('$(BIN)', os.path.join(REPO, '.venv', 'bin'))
    env = dict(user_shell_env(), ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))  # the Makefile exports it
    return lab_instance.as_written_on_this_lab(text, env)


def throughput(row, mode):
    return row[mode]['output_tok_s']


@pytest.fixture(scope='module')
def tuned(lab, tmp_path_factory):
    """gpu2 tuned once with the lab's own model: (the run, what gpu2 served before, the table)."""
    before, urls = served(lab['gpu2']), router_urls()
    run = tune(tmp_path_factory.mktemp('tune'), 'tune-default')
    found = table()
    with open(found['apply']['vars_file']) as handle:
        found['vars_file_text'] = handle.read()
    return run, before, urls, found


def test_tuning_recommends_from_its_own_table_and_leaves_the_host_as_it_found_it(lab, tuned):
    run, before, urls, found = tuned
    assert run.rc == 0, run.stdout[-3000:]
    levels = found['levels']
    assert [row['concurrency'] for row in levels] == TUNE['sglang_tune_levels']
    assert [mode['name'] for mode in found['modes']] == ['plain', 'eagle3']
    # The recommendation is its own table's first level where plain decoding is at least EAGLE-3.
    first = next((row['concurrency'] for row in levels if throughput(row, 'plain') >= throughput(row, 'eagle3')), None)
    assert found['recommended']['threshold'] == first
    # The model's crossover: EAGLE-3 ahead by far at 1 (-36% for plain), plain ahead by far from 8 on (+36%).
    assert throughput(levels[0], 'eagle3') > throughput(levels[0], 'plain')
    assert throughput(levels[3], 'plain') > throughput(levels[3], 'eagle3') and 2 <= first <= 8
    assert found['recommended']['adaptive_config']['1'] == {'candidate_steps': [3]}
    assert found['recommended']['adaptive_config'][str(first)] == {'candidate_steps': [0]}
    # The vars file applies it; the table and the command are shown (and published for the concise callback).
    assert found['apply']['vars']['sglang_dynamic_spec_batch_size_threshold'] == first
    shown = [event['event_data']['res'] for event in run.events if event.get('event') == 'runner_on_ok'
             and event['event_data'].get('task') == 'Show the table and how to apply it']
    assert len(shown) == 1 and 'output tok/s per mode (* the best at that level); threshold: %d' % first in shown[0]['msg']
    assert 'apply: ' + found['apply']['command'] in shown[0]['msg']
    # gpu2 serves what it served before, back in the router; a redeploy after it has nothing to change.
    assert served(lab['gpu2']) == before and lab['gpu2'].healthy()
    assert router_urls() == urls
    # What `make demo` runs next (issue 43: its summary once read the tuner's table as a redeploy report and exited
    # 2): the redeploy has nothing to change, and the summary reports gpu2 from the folder that holds the table.
    text, env = demo_after_the_lab_is_up('gpu2')
    demo = subprocess.run(['bash', '-euo', 'pipefail', '-c', text], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=540)
    assert demo.returncode == 0, demo.stdout[-3000:]
    assert [(counts['changed'], counts['failed']) for counts in recap(demo.stdout)['gpu2']] == [(0, 0)]
    assert os.path.exists(os.path.join(lab_instance.reports_dir(), 'gpu2.speculation.json'))
    summary = demo.stdout.split('== gpu2 (', 1)[-1].split('\n== ', 1)[0]
    assert '== gpu2 (' in demo.stdout and 'status          : unchanged, healthy True' in summary, demo.stdout[-3000:]


def test_the_printed_command_applies_the_recommendation_and_the_gate_passes_it(lab, tuned, redeploy):
    found = tuned[3]
    threshold = found['recommended']['threshold']
    host = lab['gpu2']
    # The command the tuner printed (gpu2 runs env mode: the vars file carries the threshold), on the lab's release
    # with batch-size tiers in adaptive mode, whose tiers the role builds from that threshold and the release's own
    # parser reads; with the lab's short gate.
    native = dict(GATE, sglang_python=NATIVE_PYTHON, sglang_patch_file='', sglang_dynamic_spec_mode='adaptive')
    assert found['apply']['command'].endswith('-e @%s -e sglang_perf_gate=true' % found['apply']['vars_file'])
    # This module's own tuning wrote it (the later tests tune again, after this one).
    with open(found['apply']['vars_file']) as handle:
        assert handle.read() == found['vars_file_text']
    try:
        run = redeploy(dict(native, sglang_perf_gate=True), name='apply', limit='gpu2',
                       cmdline='-e @%s' % found['apply']['vars_file'])
        assert run.rc == 0, run.stdout[-3000:]
        with open(os.path.join(lab_instance.reports_dir(), 'gpu2.json')) as handle:
            assert json.load(handle)['performance']['verdict'] == 'pass'
        adaptive = host.server_info()['internal_states'][0]['standin_adaptive']
        steps = adaptive['candidate_steps_by_batch_size']
        # Drafting below the recommended threshold, none from it on, as the release parsed the tiers.
        assert found['apply']['vars']['sglang_dynamic_spec_batch_size_threshold'] == threshold
        assert 3 in steps['1'] and steps[str(threshold)] == [0] and steps['64'] == [0]
        if threshold > 1:
            assert 3 in steps[str(threshold - 1)]
    finally:
        back = redeploy(name='apply-back', limit='gpu2')
    assert back.rc == 0, back.stdout[-3000:]


def test_a_better_draft_model_gives_a_higher_threshold(lab, tmp_path):
    thresholds = {}
    for rate in ('0.6', '0.95'):
        run = tune(tmp_path, 'tune-accept-%s' % rate, {'sglang_environment': {'LAB_STANDIN_ACCEPT_RATE': rate}})
        assert run.rc == 0, run.stdout[-3000:]
        thresholds[rate] = table()['recommended']['threshold']
    # 0.6: plain decoding ahead from 2 (or 4: +35%); 0.95: EAGLE-3 ahead up to 4 (-21%), plain from 8 or 16 (+29%).
    assert thresholds['0.6'] in (2, 4) and thresholds['0.95'] in (8, 16), thresholds
    # The environment was the tuner's, never the host's: gpu2 serves without it.
    assert 'LAB_STANDIN_ACCEPT_RATE' not in lab['gpu2'].server_info()['environment']


def test_a_mode_that_cannot_start_ends_with_the_previous_server_restored(lab, tmp_path):
    before, urls, last_table = served(lab['gpu2']), router_urls(), table_if_any()
    # An acceptance rate the stand-in refuses: the first mode's server exits at its start.
    run = tune(tmp_path, 'tune-broken', {'sglang_environment': {'LAB_STANDIN_ACCEPT_RATE': '2'}})
    assert run.rc != 0
    message = ' '.join(run.failure_messages('gpu2'))
    assert 'The speculation tuning of gpu2 stopped' in message
    assert 'The guard restored the previous server (healthy, back in the router)' in message
    assert served(lab['gpu2']) == before and lab['gpu2'].healthy() and router_urls() == urls
    # Nothing measured, nothing recommended: the last table stands.
    assert table_if_any() == last_table


def test_the_tuner_refuses_to_run_without_a_limit(tmp_path):
    run = tune(tmp_path, 'tune-all', limit=None)
    assert run.rc != 0 and 'name the host with --limit' in ' '.join(run.failure_messages('gpu1')), run.stdout[-2000:]


def test_an_extra_variable_that_would_make_two_modes_one_server_is_refused_before_anything_stops(lab, tmp_path):
    pid = lab['gpu2'].server_pid()
    # Extra variables win over the tuner's per-mode settings: "plain decoding" would be EAGLE-3 again.
    run = tune(tmp_path, 'tune-overridden', {'sglang_speculative_algorithm': 'EAGLE3'})
    assert run.rc != 0
    # The per-mode plan is a loop: the refusal is its item's message.
    assert 'cannot measure the mode plain: sglang_speculative_algorithm is given as extra variables' in run.stdout
    assert run.count('changed', 'gpu2') == 0 and lab['gpu2'].server_pid() == pid
