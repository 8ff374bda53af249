import pytest

from helpers.module_runner import run_module  # noqa: F401  (the fixture)
from ansible_collections.gpuops.sglang.plugins.modules import gpu_release

from helpers.module_runner import read_fixture

SMI = '/usr/bin/nvidia-smi'
KEYS = {'changed', 'killed', 'excluded', 'gpus_before', 'gpus', 'devices', 'compute_apps', 'elapsed', 'cmd'}
IDLE = (0, read_fixture('nvidia-smi-h200-idle.csv'), '')
HELD = (0, read_fixture('nvidia-smi-h200-held.csv'), '')


@pytest.fixture
def devices(tmp_path):
    """A device file nobody holds: the module's GPU logic, without any process to signal."""
    (tmp_path / 'nvidia0').write_text('')
    return {'devices': [str(tmp_path / 'nvidia[0-9]*')]}


def smi(readings, apps=''):
    readings = list(readings)

    def respond(argv):
        if argv[1].startswith('--query-gpu'):
            return readings.pop(0) if len(readings) > 1 else readings[0]
        return 0, apps, ''
    return respond


def test_free_gpus_are_not_a_change(run_module, devices):
    result, calls = run_module(gpu_release.main, devices, smi([IDLE]), bin_paths={'nvidia-smi': SMI})
    assert result['changed'] is False and not result['failed']
    assert result['gpus'][0]['memory_used_mib'] == 0
    assert set(result) >= KEYS
    assert calls[0] == [SMI, '--query-gpu=index,uuid,memory.used,memory.total', '--format=csv,noheader,nounits']


def test_every_nvidia_smi_call_runs_under_command_timeout(run_module, devices):
    log = {}
    result, calls = run_module(gpu_release.main, dict(devices, command_timeout=7), smi([IDLE]),
                               bin_paths={'nvidia-smi': SMI}, log=log)
    assert not result['failed']
    assert log['deadlines'] == [['--kill-after=5', '7s']] * len(calls)
    assert log['environ'][0] == {'LANG': 'C', 'LC_ALL': 'C'}


def test_memory_draining_late_is_polled_until_free(run_module, devices):
    result, calls = run_module(gpu_release.main, devices, smi([HELD, HELD, HELD, IDLE]),
                               bin_paths={'nvidia-smi': SMI})
    assert not result['failed'] and result['gpus_before'][0]['memory_used_mib'] == 20619
    assert result['gpus'][0]['memory_used_mib'] == 0
    assert len(calls) == 4


def test_memory_that_never_drains_fails_with_table_and_apps(run_module, devices):
    result, _ = run_module(gpu_release.main, dict(devices, memory_timeout=0.3), smi([HELD], apps='436, python3, 20610\n'),
                           bin_paths={'nvidia-smi': SMI})
    assert result['failed']
    assert 'did not drain to <= 0 MiB' in result['msg'] and '20619/143771' in result['msg']
    assert result['compute_apps'] == [{'pid': 436, 'process_name': 'python3', 'used_memory_mib': 20610}]
    assert set(result) >= KEYS


def test_a_release_failing_only_on_the_threshold_says_the_reading_and_the_threshold(run_module, devices):
    idle_above = (0, '0, GPU-a, 70, 81559\n', '')
    result, _ = run_module(gpu_release.main, dict(devices, max_used_mib=64, memory_timeout=0.2), smi([idle_above]),
                           bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and result['killed'] == []
    assert ('Only the threshold failed: GPU 0 reads 70 MiB with no process left, above max_used_mib 64 MiB (the'
            " role's sglang_gpu_max_used_mib)") in result['msg']


def test_memory_held_by_a_compute_app_gets_no_threshold_hint(run_module, devices):
    result, _ = run_module(gpu_release.main, dict(devices, memory_timeout=0.3), smi([HELD], apps='436, python3, 20610\n'),
                           bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'Only the threshold failed' not in result['msg']


def test_threshold_accepts_h100_idle_reading(run_module, devices):
    result, _ = run_module(gpu_release.main, dict(devices, max_used_mib=4), smi([(0, '0, GPU-a, 4, 81559\n', '')]),
                           bin_paths={'nvidia-smi': SMI})
    assert not result['failed']


def test_driver_unreachable_fails_before_killing(run_module, devices):
    broken = (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", '')
    result, _ = run_module(gpu_release.main, devices, smi([broken]), bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and "couldn't communicate with the NVIDIA driver" in result['msg']
    assert 'nothing was signalled' in result['msg'] and result['killed'] == []


def test_hung_nvidia_smi_before_the_release_fails_naming_the_command(run_module, devices):
    result, calls = run_module(gpu_release.main, dict(devices, command_timeout=3), smi([(124, '', '')]),
                               bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and set(result) >= KEYS
    assert ('`%s --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits` timed out after 3s'
            % SMI) in result['msg']
    assert 'nothing was signalled' in result['msg'] and len(calls) == 1


def test_hung_nvidia_smi_during_the_proof_stops_polling_and_says_what_was_signalled(run_module, devices):
    result, calls = run_module(gpu_release.main, dict(devices, command_timeout=3), smi([HELD, (124, '', '')]),
                               bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'cannot prove the GPU memory free' in result['msg']
    assert 'timed out after 3s' in result['msg'] and 'nothing was signalled' in result['msg']
    assert len(calls) == 2


def test_unreadable_gpu_before_the_release_is_reported_not_fatal(run_module, devices):
    sick = (0, read_fixture('nvidia-smi-one-gpu-unknown-error.csv'), '')
    result, _ = run_module(gpu_release.main, dict(devices, memory_timeout=0.2), smi([sick, IDLE]),
                           bin_paths={'nvidia-smi': SMI})
    assert not result['failed'], result['msg']
    assert 'Unknown Error' in result['gpus_before'][1]['error']
    assert result['gpus'][0]['memory_used_mib'] == 0


def test_unreadable_gpu_after_the_release_is_never_taken_as_free(run_module, devices):
    sick = (0, read_fixture('nvidia-smi-one-gpu-na.csv'), '')
    result, _ = run_module(gpu_release.main, dict(devices, memory_timeout=0.2, max_used_mib=100000), smi([sick]),
                           bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'could not be read on GPU(s) 1' in result['msg']
    assert "unreadable: nvidia-smi reported memory.used '[N/A]'" in result['msg']


def test_a_gpu_that_vanishes_from_the_listing_fails_the_proof(run_module, devices):
    two = (0, read_fixture('nvidia-smi-h200-idle.csv') + '1, GPU-b, 0, 143771\n', '')
    result, _ = run_module(gpu_release.main, dict(devices, memory_timeout=0.2), smi([two, IDLE]),
                           bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'is not listed any more for GPU(s) 1' in result['msg']


def test_devices_matching_nothing_fail_before_any_command(run_module, tmp_path):
    result, calls = run_module(gpu_release.main, {'devices': [str(tmp_path / 'nvidai*')]}, smi([IDLE]),
                               bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'match no file' in result['msg'] and 'nothing was signalled' in result['msg']
    assert calls == [] and set(result) >= KEYS


def test_a_glob_reaching_other_device_files_is_refused(run_module):
    result, calls = run_module(gpu_release.main, {'devices': ['/dev/*']}, smi([IDLE]), bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and '/dev/null (its name does not start with "nvidia")' in result['msg']
    assert calls == []


def test_missing_nvidia_smi(run_module, devices):
    result, calls = run_module(gpu_release.main, devices, smi([]), bin_paths={})
    assert result['failed'] and 'nvidia-smi was not found' in result['msg'] and calls == []


@pytest.mark.parametrize('name, value, message', [
    ('max_used_mib', -1, 'max_used_mib must not be negative'),
    ('command_timeout', 0, 'command_timeout must be greater than 0'),
])
def test_bad_numbers_are_rejected(run_module, devices, name, value, message):
    result, calls = run_module(gpu_release.main, dict(devices, **{name: value}), smi([]),
                               bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and message in result['msg'] and calls == []


def test_a_release_renews_its_guard_and_one_not_its_runs_reads_nothing(run_module, devices, tmp_path):
    import json
    guard = tmp_path / 'guard'
    guard.mkdir()
    (guard / 'state.json').write_text(json.dumps({'run_id': 'run-1', 'armed_at': 1.0, 'deadline': 9e10, 'idle': 90}))
    result, calls = run_module(gpu_release.main, dict(devices, guard={'folder': str(guard), 'run_id': 'run-1'}),
                               smi([IDLE]), bin_paths={'nvidia-smi': SMI})
    assert not result['failed'], result['msg']
    assert json.loads((guard / 'lease.json').read_text())['by'] == 'gpu_release (done)'
    refused, calls = run_module(gpu_release.main, dict(devices, guard={'folder': str(guard), 'run_id': 'run-2'}),
                                smi([IDLE]), bin_paths={'nvidia-smi': SMI})
    assert refused['failed'] and 'the rollback guard of run run-2 is not armed' in refused['msg'] and calls == []
    assert set(refused) >= KEYS


def test_a_release_whose_controller_is_gone_renews_nothing_and_reads_nothing(run_module, devices, tmp_path,
                                                                           monkeypatch):
    import json
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _lease
    guard = tmp_path / 'guard'
    guard.mkdir()
    (guard / 'state.json').write_text(json.dumps({'run_id': 'run-1', 'armed_at': 1.0, 'deadline': 9e10, 'idle': 90}))
    monkeypatch.setattr(_lease, 'controller_gone', lambda: True)
    result, calls = run_module(gpu_release.main, dict(devices, guard={'folder': str(guard), 'run_id': 'run-1'}),
                               smi([HELD]), bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and result['msg'].startswith('the controller of this run is gone'), result['msg']
    assert 'gpu_release renewed nothing' in result['msg'] and set(result) >= KEYS
    assert calls == [] and result['killed'] == [] and not (guard / 'lease.json').exists()


def test_memory_is_read_through_nvml_where_it_works(run_module, devices, monkeypatch):
    from helpers.fake_nvml import FakeNvml
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _release
    monkeypatch.setattr(_release, 'pynvml', FakeNvml([[0]]))
    result, calls = run_module(gpu_release.main, devices, smi([HELD]), bin_paths={'nvidia-smi': SMI})
    assert not result['failed'] and result['memory_reader'] == 'NVML' and result['cmd'] == []
    assert calls == [] and result['gpus'][0]['memory_used_mib'] == 0
    assert [entry['event'] for entry in result['timeline']][-2:] == ['gpu reading', 'memory free']
    assert result['timeline'][-2]['detail'] == 'NVML: GPU 0 0 MiB'


def test_memory_reader_nvidia_smi_ignores_nvml(run_module, devices, monkeypatch):
    from helpers.fake_nvml import FakeNvml
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _release
    monkeypatch.setattr(_release, 'pynvml', FakeNvml([[20619 * 2 ** 20]]))
    result, calls = run_module(gpu_release.main, dict(devices, memory_reader='nvidia-smi'), smi([IDLE]),
                               bin_paths={'nvidia-smi': SMI})
    assert not result['failed'] and result['memory_reader'] == 'nvidia-smi' and len(calls) == 2
    assert result['timeline'][-2]['detail'] == 'nvidia-smi: GPU 0 0 MiB'


def test_memory_reader_nvml_without_nvidia_ml_py_fails_before_signalling(run_module, devices, monkeypatch):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _release
    monkeypatch.setattr(_release, 'pynvml', None)
    result, calls = run_module(gpu_release.main, dict(devices, memory_reader='nvml'), smi([IDLE]),
                               bin_paths={'nvidia-smi': SMI})
    assert result['failed'] and 'nvidia-ml-py (pynvml) is not installed' in result['msg']
    assert 'nothing was signalled' in result['msg'] and calls == [] and result['killed'] == []
