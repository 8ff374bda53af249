"""sglang_speculation: each mode's benchmark made into the tuner's table on the controller, the recommendation and
the vars file that applies it written beside the reports, the table published for the concise callback."""
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleActionFail

from ansible_collections.gpuops.sglang.plugins.action.sglang_speculation import ActionModule
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file

MODES = [{'name': 'plain', 'steps': 0}, {'name': 'eagle3', 'steps': 3}]


def benchmark(*throughput):
    return {'measured': True, 'levels': [{'concurrency': c, 'output_tok_s': value, 'itl_p95_s': 0.01,
                                          'ttft_p95_s': 0.1, 'timed_out': False}
                                         for c, value in zip((1, 2, 4, 8), throughput)]}


def args(folder, **changes):
    found = {'host': 'gpu2', 'modes': MODES, 'configured_steps': 3, 'configured_draft_tokens': 4,
             'report_dir': str(folder),
             'measured': {'plain': benchmark(90, 170, 320, 560), 'eagle3': benchmark(140, 230, 300, 350)},
             'measured_at': '2026-12-03T21:00:00Z', 'settings': {'levels': [1, 2, 4, 8]}}
    found.update(changes)
    return found


def test_the_table_the_recommendation_and_the_vars_file_are_written_beside_the_reports(run_action, tmp_path):
    folder = tmp_path / 'reports'
    result = run_action(ActionModule, {}, args=args(folder))
    assert result['recommended']['threshold'] == 4 and not result.get('failed')
    written = json.loads((folder / 'gpu2.speculation.json').read_text())
    assert written['levels'][2] == {'concurrency': 4, 'plain': {'output_tok_s': 320, 'itl_p95_s': 0.01, 'ttft_p95_s': 0.1},
                                    'eagle3': {'output_tok_s': 300, 'itl_p95_s': 0.01, 'ttft_p95_s': 0.1}}
    assert written['recommended']['adaptive_config'] == {'1': {'candidate_steps': [3]}, '4': {'candidate_steps': [0]}}
    assert written['settings'] == {'levels': [1, 2, 4, 8]} and written['measured_at'] == '2026-12-03T21:00:00Z'
    # The vars file is YAML the redeploy reads with -e @FILE: the role variables that apply the recommendation.
    applied = yaml.safe_load((folder / 'gpu2.speculation.vars.yml').read_text())
    assert applied == written['apply']['vars'] == result['vars']
    assert applied['sglang_dynamic_spec_batch_size_threshold'] == 4
    assert result['command'] == ('ansible-playbook playbooks/redeploy.yml --limit gpu2 -e @%s/gpu2.speculation.vars.yml'
                                 ' -e sglang_perf_gate=true' % folder)
    assert oct((folder / 'gpu2.speculation.json').stat().st_mode & 0o777) == '0o644'
    # Published for the concise callback, which prints it before the recap.
    assert result['ansible_stats']['data']['sglang_speculation'] == {'gpu2': result['table']}
    assert result['table'][-1] == 'apply: ' + result['command']


def test_a_mode_without_figures_is_refused_and_nothing_is_written(run_action, tmp_path):
    with pytest.raises(AnsibleActionFail, match='no benchmark of the mode.s. eagle3'):
        run_action(ActionModule, {}, args=args(tmp_path, measured={'plain': benchmark(90, 170, 320, 560)}))
    assert os.listdir(str(tmp_path)) == []


def test_a_folder_that_cannot_be_written_says_so(run_action, tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('')
    with pytest.raises(AnsibleActionFail, match='could not write the tuning table of gpu2 to'):
        run_action(ActionModule, {}, args=args(blocker / 'reports'))


def test_nothing_compared_is_refused_and_nothing_is_written(run_action, tmp_path):
    timed_out = {'measured': True, 'levels': [{'concurrency': 1, 'output_tok_s': 1.0, 'timed_out': True}]}
    with pytest.raises(AnsibleActionFail, match='no level was served in time and without errors'):
        run_action(ActionModule, {}, args=args(tmp_path, measured={'plain': timed_out, 'eagle3': timed_out}))
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize('host', ['../../escaped', 'a/b', '..'])
def test_a_host_name_that_leads_out_of_the_folder_keeps_its_table_inside_it(run_action, tmp_path, host):
    # Ansible accepts '../../escaped' as an inventory name: joined as it was, the table went two folders up.
    folder = tmp_path / 'a' / 'b' / 'reports'
    result = run_action(ActionModule, {}, args=args(folder, host=host))
    assert os.listdir(str(tmp_path)) == ['a'] and os.listdir(str(tmp_path / 'a')) == ['b']
    assert os.listdir(str(folder.parent)) == ['reports']
    assert sorted(os.listdir(str(folder))) == sorted([host_file(host, 'speculation'), host_file(host, 'speculation_vars')])
    assert result['file'] == str(folder / host_file(host, 'speculation'))
    assert json.loads((folder / host_file(host, 'speculation')).read_text())['host'] == host
