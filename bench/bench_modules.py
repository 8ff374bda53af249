"""Times gpu_release and sglang_patch through real Ansible (ansible-runner, local connection).

Targets are in bench/README.md. Prints one line per measurement and writes bench/results/*.json.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'tests'))
import conftest  # noqa: E402,F401  (makes gpuops.sglang importable, as under pytest)

from helpers.ansible_run import REPO, run_task  # noqa: E402
from helpers.simulated import SimulatedGpuHost  # noqa: E402


def timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def bench_gpu_release(tmp, holders=16):
    host = SimulatedGpuHost(tmp, gpus=4)
    try:
        for index in range(holders):
            host.start('sglang::scheduler_TP%d' % index, hold=[(index % 4, 1024)], open_=['nvidiactl'])
        args = {'devices': host.device_globs, 'nvidia_smi': host.nvidia_smi, 'term_timeout': 5, 'memory_timeout': 10}
        result, seconds = timed(lambda: run_task(tmp, 'gpuops.sglang.gpu_release', args))
        assert not result.failed, result.get('msg')
        return {'holders': holders, 'task_seconds': round(seconds, 3), 'module_elapsed': result['elapsed'],
                'target_seconds': 3.0, 'met': seconds < 3.0}
    finally:
        host.stop_all()


def bench_sglang_patch(tmp):
    venv = tmp / 'venv'
    subprocess.check_call([sys.executable, '-m', 'venv', '--without-pip', str(venv)])
    site = venv / 'lib' / ('python%d.%d' % sys.version_info[:2]) / 'site-packages'
    requirement = [line for line in open(os.path.join(REPO, 'requirements', 'lab.txt')) if line.startswith('sglang==')][0]
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--no-index', '--find-links',
                           os.path.join(REPO, '.cache', 'wheels'), '--target', str(site), requirement.strip()])
    args = {'src': os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff'), 'python': str(venv / 'bin' / 'python')}
    result, seconds = timed(lambda: run_task(tmp, 'gpuops.sglang.sglang_patch', args))
    assert not result.failed and result['changed'], result.get('msg')
    return {'task_seconds': round(seconds, 3), 'target_seconds': 2.0, 'met': seconds < 2.0}


def main():
    out = HERE / 'results'
    out.mkdir(exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results['gpu_release_16_holders'] = bench_gpu_release(Path(tmp) / 'release')
    with tempfile.TemporaryDirectory() as tmp:
        results['sglang_patch_apply'] = bench_sglang_patch(Path(tmp))
    for name, values in results.items():
        print('%-26s %s' % (name, json.dumps(values)))
    (out / ('bench-%s.json' % time.strftime('%Y%m%dT%H%M%S'))).write_text(json.dumps(results, indent=2))
    return 0 if all(values['met'] for values in results.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
