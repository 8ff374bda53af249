"""gpu_release's memory readers: NVML v2 through nvidia-ml-py (a fake here), nvidia-smi otherwise."""
import threading

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import FreeMemoryProof, NvidiaSmiError
from helpers.fake_nvml import FakeNvml
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import (
    MIB,
    NvmlReader,
    NvmlUnavailable,
    choose_reader,
)


def test_memory_is_read_as_v2_and_rounded_up_to_whole_mib():
    nvml = FakeNvml([[0], [1], [21098 * MIB + 512 * 1024]])
    gpus = NvmlReader.open(5, nvml).gpus()
    assert [gpu['memory_used_mib'] for gpu in gpus] == [0, 1, 21099]
    assert set(nvml.versions) == {nvml.nvmlMemory_v2}
    assert gpus[0] == {'index': 0, 'uuid': 'GPU-0', 'memory_used_mib': 0, 'memory_total_mib': 143771, 'error': None}


@pytest.mark.parametrize('gpus, broken, expected, free', [
    ([[0], [0]], (), [0, 1], True),
    ([[0], [1]], (), [0, 1], False),          # one byte used is over a threshold of 0 MiB
    ([[0]], (), [0, 1], False),               # a GPU seen before the release is missing now
    ([[0], [0]], (1,), [0, 1], False),        # a GPU NVML cannot reach is never taken as free
])
def test_proof_through_nvml_is_as_strict_as_through_nvidia_smi(gpus, broken, expected, free):
    proof = FreeMemoryProof(NvmlReader.open(5, FakeNvml(gpus, broken)), 0, expected)
    proof.read()
    assert proof.free() is free


def test_a_hung_nvml_call_ends_the_wait_like_a_hung_nvidia_smi():
    release = threading.Event()
    nvml = FakeNvml([[0]])
    reader = NvmlReader.open(0.05, nvml)
    nvml.hang = release  # wedged after the reader opened
    try:
        with pytest.raises(CommandError, match='did not return within 0.05s'):
            reader.gpus()
        proof = FreeMemoryProof(reader, 0, [0])
        proof.read()
        assert proof.timed_out is not None and not proof.free()
    finally:
        release.set()


def test_nvml_that_counts_no_gpu_is_an_error():
    with pytest.raises(NvidiaSmiError, match='NVML listed no GPU'):
        NvmlReader.open(5, FakeNvml([])).gpus()


class Smi(object):
    source_name = 'nvidia-smi'
    poll_intervals = (0.05, 0.25)

    class command(object):
        @staticmethod
        def query_gpus():
            return ['nvidia-smi', '--query-gpu=index,uuid,memory.used,memory.total']

    def compute_apps(self):
        return []


class OldNvml(FakeNvml):
    """nvidia-ml-py before NVML v2 memory info."""

    @property
    def nvmlMemory_v2(self):
        raise AttributeError('nvmlMemory_v2')


@pytest.mark.parametrize('choice, nvml, smi, source, why', [
    ('auto', FakeNvml([[0]]), True, 'NVML', None),
    ('auto', FakeNvml([[0]], init_error='Driver Not Loaded'), True, 'nvidia-smi', 'nvmlInit failed: Driver Not Loaded'),
    ('auto', OldNvml([[0]]), True, 'nvidia-smi', 'nvidia-ml-py is too old for NVML v2 memory info (nvmlMemory_v2)'),
    ('auto', FakeNvml([[0]]), False, 'NVML', None),
    ('nvml', FakeNvml([[0]]), True, 'NVML', None),
    ('nvidia-smi', FakeNvml([[0]]), True, 'nvidia-smi', None),
])
def test_reader_choice(choice, nvml, smi, source, why):
    reader, reason = choose_reader(choice, Smi() if smi else None, 5, nvml)
    assert (reader.source_name, reason) == (source, why)
    assert reader.cmd() == ([] if source == 'NVML' else Smi.command.query_gpus())
    assert reader.compute_apps() == ([] if smi else [{'error': 'nvidia-smi was not found on PATH: no compute apps to show'}])


@pytest.mark.parametrize('choice, nvml, smi, error', [
    ('nvml', FakeNvml([[0]], init_error='Driver Not Loaded'), True, NvmlUnavailable),
    ('auto', FakeNvml([[0]], init_error='Driver Not Loaded'), False, NvidiaSmiError),
    ('nvidia-smi', FakeNvml([[0]]), False, NvidiaSmiError),
])
def test_reader_choice_that_cannot_be_met_fails(choice, nvml, smi, error):
    with pytest.raises(error):
        choose_reader(choice, Smi() if smi else None, 5, nvml)


def test_closing_the_reader_shuts_nvml_down():
    nvml = FakeNvml([[0]])
    reader, _ = choose_reader('auto', Smi(), 5, nvml)
    reader.close()
    assert nvml.shut


def test_a_driver_without_v2_memory_info_is_no_nvml_so_auto_takes_nvidia_smi():
    nvml = FakeNvml([[0]], v2_error='Function Not Found')
    with pytest.raises(NvmlUnavailable, match='v2 memory info cannot be read: Function Not Found'):
        NvmlReader.open(1, nvml)
    assert nvml.shut


def test_nvml_that_hangs_at_its_first_reading_is_no_nvml():
    release = threading.Event()
    try:
        with pytest.raises(NvmlUnavailable, match='did not return within 0.05s'):
            NvmlReader.open(0.05, FakeNvml([[0]], hang=release))
    finally:
        release.set()
