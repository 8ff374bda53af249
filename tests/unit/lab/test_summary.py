"""`lab/lab summary` reads only the redeploy reports of the lab's report folder (issue 43: a tuning run's
gpu2.speculation.json read as a report crashed `make demo` with KeyError: 'service_manager')."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))

REPORT = {
    'host': 'gpu2', 'service_manager': 'detached', 'status': 'redeployed', 'healthy': True,
    'reason': 'patch not applied', 'killed_in_container': [], 'killed_gpu_holders': ['python3 leaked_cuda_job.py'],
    'gpu_memory_before_mib': [2048], 'gpu_memory_released_mib': [0], 'patch': 'applied now',
    'sglang_version': '0.5.12.post1', 'patch_sha256': '2d5738f8320f' * 5, 'router': {}, 'phases_s': {'stop': 1.5},
    'downtime_s': 4.2,
}

# What else the folder holds after the documented actions: the tuner's table and vars file, the previous
# redeploy's copy, the rollback playbook's record (plugins/plugin_utils/_host_files.SUFFIXES).
OTHER_FILES = {
    'gpu2.speculation.json': json.dumps({'host': 'gpu2', 'threshold': 8, 'levels': [1, 2, 4, 8]}),
    'gpu2.speculation.vars.yml': 'sglang_dynamic_spec_batch_size_threshold: 8\n',
    'gpu2.last-redeploy.json': json.dumps(dict(REPORT, status='unchanged')),
    'gpu2.rollback.json': json.dumps({'host': 'gpu2', 'restored': True}),
}


@pytest.fixture
def scratch_lab(tmp_path):
    """A scratch checkout holding only what `lab/lab summary` runs, its report folder empty (instance 0)."""
    for path in ('lab/lab', 'lab/summary.py', 'plugins/plugin_utils/_host_files.py'):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(REPO, path), str(tmp_path / path))
    reports = tmp_path / '.cache' / 'lab' / 'reports'
    reports.mkdir(parents=True)
    return tmp_path, reports


def summary(checkout):
    env = {key: value for key, value in os.environ.items() if key != 'LAB_INSTANCE'}
    return subprocess.run([str(checkout / 'lab' / 'lab'), 'summary'], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)


def test_summary_after_a_tuning_run_prints_only_the_redeploy_report(scratch_lab):
    checkout, reports = scratch_lab
    (reports / 'gpu2.json').write_text(json.dumps(REPORT))
    for name, text in OTHER_FILES.items():
        (reports / name).write_text(text)
    run = summary(checkout)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count('== ') == 1, run.stdout
    assert run.stdout.startswith('== gpu2 (detached)\n   status          : redeployed, healthy True\n'), run.stdout


def test_summary_without_a_redeploy_report_says_to_run_make_demo(scratch_lab):
    checkout, reports = scratch_lab
    for name, text in OTHER_FILES.items():
        (reports / name).write_text(text)
    run = summary(checkout)
    assert run.returncode == 1 and 'no redeploy report yet' in run.stderr and 'run make demo' in run.stderr, run


def test_a_file_named_like_a_report_of_another_shape_is_left_out_saying_so(scratch_lab):
    checkout, reports = scratch_lab
    (reports / 'gpu1.json').write_text(json.dumps({'threshold': 8}))
    (reports / 'gpu2.json').write_text(json.dumps(REPORT))
    run = summary(checkout)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count('== ') == 1 and 'gpu1.json is named like a redeploy report' in run.stderr, run
