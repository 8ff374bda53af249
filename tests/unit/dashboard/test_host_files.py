"""The dashboard reads a host's report and tuning table under the names the role's writers gave them: a host named
'../x' is read inside sglang_report_dir, never from the folder above it."""
import json
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.action.sglang_report import ActionModule as Report
from ansible_collections.gpuops.sglang.plugins.action.sglang_speculation import ActionModule as Speculation
from gpuops_dashboard import inventory
from helpers.module_runner import run_action

HOST = '../x'
SETTINGS = {'patch_file': '', 'router_url': '', 'rollback_deadline': 1800, 'rollback_idle': 90, 'guard_dir': '/g'}
BENCHMARK = {'measured': True, 'levels': [{'concurrency': 1, 'output_tok_s': 90.0, 'itl_p95_s': 0.01, 'ttft_p95_s': 0.1,
                                           'timed_out': False}]}


PLANTED = {'x.json': {'status': 'planted'}, 'x.speculation.json': {'host': 'planted'}}


@pytest.fixture
def reports(tmp_path):
    """sglang_report_dir, with what the names joined as they were read planted beside it (its parent's x.json)."""
    for name, content in PLANTED.items():
        (tmp_path / name).write_text(json.dumps(content))
    yield tmp_path / 'reports'
    # Neither a writer nor a reader touched what lies outside the folder.
    assert sorted(os.listdir(str(tmp_path))) == sorted(list(PLANTED) + ['reports'])
    assert all(json.loads((tmp_path / name).read_text()) == content for name, content in PLANTED.items())


@pytest.mark.parametrize('name, read', [('%2E.%2Fx.json', inventory.last_report),
                                        ('%2E.%2Fx.speculation.json', inventory.last_speculation)],
                         ids=['report', 'tuning-table'])
def test_a_host_named_dot_dot_slash_is_read_under_its_encoded_name_only(reports, name, read):
    reports.mkdir()
    assert read(str(reports), HOST) is None
    (reports / name).write_text(json.dumps({'status': 'written', 'host': HOST}))
    assert read(str(reports), HOST)['status'] == 'written'


def test_the_report_of_a_host_named_dot_dot_slash_is_read_from_its_folder(reports):
    written = run_action(Report, {'run': {'skip_reason': 'left alone'}, 'settings': SETTINGS, 'host': HOST,
                                  'report_dir': str(reports)})
    assert not written['failed'] and written['written'], written
    found = inventory.last_report(str(reports), HOST)
    assert found is not None and found['status'] == written['report']['status'] != 'planted'


def test_the_tuning_table_of_a_host_named_dot_dot_slash_is_read_from_its_folder(reports):
    written = run_action(Speculation, {'host': HOST, 'modes': [{'name': 'plain', 'steps': 0},
                                                               {'name': 'eagle3', 'steps': 3}],
                                       'measured': {'plain': BENCHMARK, 'eagle3': BENCHMARK}, 'configured_steps': 3,
                                       'configured_draft_tokens': 4, 'report_dir': str(reports)})
    assert not written['failed'], written
    found = inventory.last_speculation(str(reports), HOST)
    assert found is not None and found['host'] == HOST and found['levels'] == written['levels']
