import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils import _nvidia as nvidia
from helpers.module_runner import read_fixture


def test_idle_h200_parses_to_zero_used():
    gpus = nvidia.parse_gpus(read_fixture('nvidia-smi-h200-idle.csv'))
    assert gpus == [{'index': 0, 'uuid': 'GPU-6f0b2c1e-8a4d-4c1b-9a53-2b7e0d9f1a11',
                     'memory_used_mib': 0, 'memory_total_mib': 143771}]
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
    ('0, GPU-a, [N/A], 81559\n', "'[N/A]' instead of a MiB number"),
    ('0, GPU-a, 12\n', 'expected 4 fields'),
    ('NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.\n', 'expected 4 fields'),
])
def test_unparsable_output_raises_with_the_line(text, message):
    with pytest.raises(nvidia.NvidiaSmiError, match=message.replace('[', r'\[').replace(']', r'\]')):
        nvidia.parse_gpus(text)


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
