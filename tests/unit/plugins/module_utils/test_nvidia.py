import os
import shutil

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers import _nvidia as nvidia
from helpers.module_runner import read_fixture


def test_idle_h200_parses_to_zero_used():
    gpus = nvidia.parse_gpus(read_fixture('nvidia-smi-h200-idle.csv'))
    assert gpus == [{'index': 0, 'uuid': 'GPU-6f0b2c1e-8a4d-4c1b-9a53-2b7e0d9f1a11',
                     'memory_used_mib': 0, 'memory_total_mib': 143771, 'error': None}]
    assert nvidia.gpus_over(gpus, 0) == []


def test_held_h200_is_over_threshold_where_grep_0mib_was_not():
    text = read_fixture('nvidia-smi-h200-held.csv')
    gpus = nvidia.parse_gpus(text)
    assert gpus[0]['memory_used_mib'] == 20619
    assert nvidia.gpus_over(gpus, 0) == gpus
    # The manual check: the 143771 total ends in ...1, but "0MiB"-style substrings still
    # appear on busy lines; only the parsed number tells the states apart.
    assert nvidia.gpus_over(gpus, 20619) == []


def test_several_gpus_and_threshold_for_h100_idle_reading():
    gpus = nvidia.parse_gpus('0, GPU-a, 4, 81559\n1, GPU-b, 5, 81559\n')
    assert [gpu['index'] for gpu in nvidia.gpus_over(gpus, 4)] == [1]


@pytest.mark.parametrize('text, message', [
    ('', 'listed no GPU'),
    ('0, GPU-a, 12\n', 'listed no GPU: unparsable nvidia-smi line: 0, GPU-a, 12'),
    ('NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.\n', 'couldn.t communicate'),
])
def test_output_naming_no_gpu_raises_with_the_line(text, message):
    with pytest.raises(nvidia.NvidiaSmiError, match=message):
        nvidia.parse_gpus(text)


def test_na_on_one_gpu_is_a_record_with_an_error_not_an_exception():
    gpus = nvidia.parse_gpus(read_fixture('nvidia-smi-one-gpu-na.csv'))
    assert [gpu['memory_used_mib'] for gpu in gpus] == [20619, None]
    assert gpus[1]['error'] == "nvidia-smi reported memory.used '[N/A]' and memory.total '[N/A]' instead of a MiB number"
    assert nvidia.unreadable(gpus) == [gpus[1]]
    # fail safe: an unreadable GPU is never "not over"
    assert nvidia.gpus_over(gpus, 1000000) == [gpus[1]]
    assert not nvidia.proven_free(gpus, 1000000)


def test_unknown_error_line_is_kept_beside_the_readable_gpu():
    gpus = nvidia.parse_gpus(read_fixture('nvidia-smi-one-gpu-unknown-error.csv'))
    assert gpus[0]['memory_used_mib'] == 0 and gpus[0]['error'] is None
    assert gpus[1]['index'] is None and 'Unknown Error' in gpus[1]['error']
    assert not nvidia.proven_free(gpus, 0)
    assert nvidia.proven_free(gpus[:1], 0)


def test_a_gpu_missing_from_a_later_reading_is_not_proven_free():
    gpus = nvidia.parse_gpus(read_fixture('nvidia-smi-h200-idle.csv'))
    assert nvidia.proven_free(gpus, 0, expected_indices=[0])
    assert not nvidia.proven_free(gpus, 0, expected_indices=[0, 1])
    table = nvidia.format_gpu_table(gpus, 0, expected_indices=[0, 1])
    assert 'missing: listed before the release' in table.splitlines()[2]


def test_table_shows_unreadable_rows():
    table = nvidia.format_gpu_table(nvidia.parse_gpus(read_fixture('nvidia-smi-one-gpu-na.csv')), 0)
    lines = table.splitlines()
    assert '20619/143771' in lines[1] and '<-- over 0 MiB' in lines[1]
    assert '?/?' in lines[2] and "unreadable: nvidia-smi reported memory.used '[N/A]'" in lines[2]


def test_compute_apps_from_h200():
    assert nvidia.parse_compute_apps(read_fixture('nvidia-smi-h200-apps.csv')) == [
        {'pid': 436, 'process_name': 'python3', 'used_memory_mib': 20610}]
    assert nvidia.parse_compute_apps('') == []
    assert nvidia.parse_compute_apps('7, /usr/bin/python3 a,b.py, 12\n')[0]['process_name'] == '/usr/bin/python3 a,b.py'


def test_argv_uses_csv_noheader_nounits():
    command = nvidia.NvidiaSmiCommand('/usr/bin/nvidia-smi')
    assert command.query_gpus() == ['/usr/bin/nvidia-smi', '--query-gpu=index,uuid,memory.used,memory.total',
                                    '--format=csv,noheader,nounits']
    assert command.query_compute_apps()[1] == '--query-compute-apps=pid,process_name,used_memory'


def test_table_flags_busy_gpus():
    table = nvidia.format_gpu_table(nvidia.parse_gpus('0, GPU-a, 0, 10\n1, GPU-b, 7, 10\n'), 0)
    assert '<-- over 0 MiB' in table.splitlines()[2] and 'over' not in table.splitlines()[1]


def test_device_paths_must_be_nvidia_device_files(tmp_path):
    (tmp_path / 'nvidia0').write_text('')
    (tmp_path / 'nvidia-caps').mkdir()
    (tmp_path / 'null-link').symlink_to('/dev/null')
    (tmp_path / 'nvidia9').symlink_to('/dev/null')
    assert nvidia.device_refusal(str(tmp_path / 'nvidia0')) is None
    assert 'does not start with "nvidia"' in nvidia.device_refusal('/dev/null')
    assert 'not a device file' in nvidia.device_refusal(str(tmp_path / 'nvidia-caps'))
    assert 'links to /dev/null' in nvidia.device_refusal(str(tmp_path / 'nvidia9'))
    assert 'does not start with "nvidia"' in nvidia.device_refusal(str(tmp_path / 'null-link'))


def test_a_plain_file_under_dev_is_not_a_device():
    import tempfile
    folder = tempfile.mkdtemp(prefix='gpuops-test-', dir='/dev/shm')
    try:
        path = os.path.join(folder, 'nvidia0')
        open(path, 'w').close()
        assert nvidia.device_refusal(path) == 'it is under /dev but not a character device'
    finally:
        shutil.rmtree(folder)


def test_expand_devices_refuses_a_broad_glob_and_a_glob_matching_nothing(tmp_path):
    with pytest.raises(nvidia.DeviceError, match=r'/dev/null \(its name does not start with "nvidia"\)'):
        nvidia.expand_devices(['/dev/nul*'])
    with pytest.raises(nvidia.DeviceError, match='match no file'):
        nvidia.expand_devices([str(tmp_path / 'nvidai[0-9]*')])
    (tmp_path / 'nvidia0').write_text('')
    assert nvidia.expand_devices([str(tmp_path / 'nvidia[0-9]*')]) == [str(tmp_path / 'nvidia0')]
