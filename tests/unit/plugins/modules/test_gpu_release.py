from ansible_collections.gpuops.sglang.plugins.modules import gpu_release

from helpers.module_runner import read_fixture

SMI = '/usr/bin/nvidia-smi'
KEYS = {'changed', 'killed', 'excluded', 'gpus_before', 'gpus', 'devices', 'compute_apps', 'elapsed', 'cmd'}
NO_DEVICES = {'devices': ['/nonexistent/nvidia[0-9]*']}


def smi(readings, apps=''):
    readings = list(readings)

    def respond(argv):
        if argv[1].startswith('--query-gpu'):
            return readings.pop(0) if len(readings) > 1 else readings[0]
        return 0, apps, ''
    return respond


def test_free_gpus_are_not_a_change(run_module):
    idle = (0, read_fixture('nvidia-smi-h200-idle.csv'), '')
    result, calls = run_module(gpu_release.main, NO_DEVICES, smi([idle]), bin_paths={'nvidia-smi': SMI})
    assert result['changed'] is False and not result['failed']
    assert result['gpus'][0]['memory_used_mib'] == 0
    assert set(result) >= KEYS
    assert calls[0] == [SMI, '--query-gpu=index,uuid,memory.used,memory.total', '--format=csv,noheader,nounits']


def test_memory_draining_late_is_polled_until_free(run_module):
    held = (0, read_fixture('nvidia-smi-h200-held.csv'), '')
    idle = (0, read_fixture('nvidia-smi-h200-idle.csv'), '')
    result, calls = run_module(gpu_release.main, NO_DEVICES, smi([held, held, held, idle]),
                               bin_paths={'nvidia-smi': SMI})
    assert not result['failed'] and result['gpus_before'][0]['memory_used_mib'] == 20619
    assert result['gpus'][0]['memory_used_mib'] == 0
    assert len(calls) == 4


def test_memory_that_never_drains_fails_with_table_and_apps(run_module):
    held = (0, read_fixture('nvidia-smi-h200-held.csv'), '')
    result, _ = run_module(gpu_release.main, dict(NO_DEVICES, timeout=0.3), smi([held], apps='436, python3, 20610\n'),
                           bin_paths={'nvidia-smi': SMI})
    assert result['failed']
    assert 'did not drain to <= 0 MiB' in result['msg'] and '20619/143771' in result['msg']
    assert result['compute_apps'] == [{'pid': 436, 'process_name': 'python3', 'used_memory_mib': 20610}]
    assert set(result) >= KEYS


def test_threshold_accepts_h100_idle_reading(run_module):
    result, _ = run_module(gpu_release.main, dict(NO_DEVICES, max_used_mib=4), smi([(0, '0, GPU-a, 4, 81559\n', '')]),
                           bin_paths={'nvidia-smi': SMI})
    assert not result['failed']


def test_driver_unreachable_fails_before_killing(run_module):
    broken = (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", '')
    result, _ = run_module(gpu_release.main, NO_DEVICES, smi([broken]), bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and "couldn't communicate with the NVIDIA driver" in result['msg']
    assert 'nothing was killed' in result['msg'] and result['killed'] == []


def test_missing_nvidia_smi(run_module):
    result, calls = run_module(gpu_release.main, {}, smi([]), bin_paths={})
    assert result['failed'] and 'nvidia-smi was not found' in result['msg'] and calls == []


def test_negative_threshold_is_rejected(run_module):
    result, calls = run_module(gpu_release.main, {'max_used_mib': -1}, smi([]), bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'max_used_mib must not be negative' in result['msg'] and calls == []
