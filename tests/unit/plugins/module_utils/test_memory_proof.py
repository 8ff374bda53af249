"""The one "GPU memory is free" proof (_nvidia.FreeMemoryProof), as gpu_release and the guard both use it."""
import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import Guard, GuardError
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import FreeMemoryProof, GpuReader

TWO_BUSY = '0, GPU-a, 20610, 143771\n1, GPU-b, 20610, 143771\n'
ONE_FREE = '0, GPU-a, 0, 143771\n'
TWO_FREE = '0, GPU-a, 0, 143771\n1, GPU-b, 0, 143771\n'


class Smi(object):
    """nvidia-smi as a standard-library runner: each call answers the next reading, the last one for ever."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer if isinstance(answer, tuple) else (0, answer, '')


def proof_over(smi, expected=None):
    return FreeMemoryProof(GpuReader(CommandRunner.over(smi, 30), '/usr/bin/nvidia-smi'), 0, expected)


def test_without_a_reading_from_before_the_first_one_names_the_gpus_that_must_stay_listed():
    proof = proof_over(Smi(TWO_BUSY, ONE_FREE))
    gpus = proof.wait(0.1)
    # GPU 1 dropped off the bus: the one GPU left reads 0 MiB, and that is not a proof.
    assert gpus == proof.gpus and [gpu['index'] for gpu in gpus] == [0]
    assert not proof.free() and proof.missing() == [1]


def test_memory_that_drains_is_proven_free_on_the_first_reading_that_shows_it():
    smi = Smi(TWO_BUSY, TWO_BUSY, TWO_FREE)
    proof = proof_over(smi, expected=[0, 1])
    proof.wait(5)
    assert proof.free() and len(smi.calls) == 3


def test_a_hung_nvidia_smi_ends_the_wait_at_once():
    smi = Smi((124, '', 'nvidia-smi did not finish within 30s'))
    proof = proof_over(smi, expected=[0])
    proof.wait(60)
    assert proof.timed_out is not None and len(smi.calls) == 1 and not proof.free()


def test_a_failed_reading_is_read_again_and_its_error_kept():
    proof = proof_over(Smi((9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", ''),
                           TWO_FREE), expected=[0, 1])
    proof.read()
    assert proof.last_error and 'rc 9' in proof.last_error and not proof.free()
    proof.read()
    assert proof.last_error is None and proof.free()


def guard_waiting_for(tmp_path, smi, timeout=0.1, gpus=()):
    guard = Guard(str(tmp_path), runner=smi)
    return lambda: guard._wait_gpus({'nvidia_smi': '/usr/bin/nvidia-smi', 'max_used_mib': 0, 'gpu_timeout': timeout,
                                     'gpus': list(gpus)})


def test_the_guard_refuses_to_start_the_previous_server_while_a_gpu_is_missing(tmp_path):
    with pytest.raises(GuardError, match=r'GPU\(s\) 1 not listed by nvidia-smi any more'):
        guard_waiting_for(tmp_path, Smi(TWO_BUSY, ONE_FREE))()


def test_the_guard_names_the_gpus_still_in_use(tmp_path):
    with pytest.raises(GuardError, match='^GPU memory still in use: GPU 0 20610 MiB, GPU 1 20610 MiB$'):
        guard_waiting_for(tmp_path, Smi(TWO_BUSY))()


def test_the_guard_goes_on_once_every_gpu_reads_free(tmp_path):
    smi = Smi(TWO_BUSY, TWO_FREE)
    gpus = guard_waiting_for(tmp_path, smi, timeout=5)()
    assert [gpu['memory_used_mib'] for gpu in gpus] == [0, 0]
    assert smi.calls[0] == ['/usr/bin/nvidia-smi', '--query-gpu=index,uuid,memory.used,memory.total',
                            '--format=csv,noheader,nounits']


def test_the_guard_says_when_nvidia_smi_never_answered(tmp_path):
    with pytest.raises(GuardError, match='^nvidia-smi failed: .*rc 9'):
        guard_waiting_for(tmp_path, Smi((9, 'No devices were found', '')))()


GPU1_BUSY = '0, GPU-a, 0, 143771\n1, GPU-b, 20610, 143771\n'


@pytest.mark.parametrize('gpus', [['0'], ['GPU-a']])
def test_the_guard_of_a_server_owning_some_gpus_waits_for_those_only(tmp_path, gpus):
    # A neighbour's server holds GPU 1 (issue 44): this server's restore goes on once its own GPU reads free.
    smi = Smi(GPU1_BUSY)
    assert [gpu['index'] for gpu in guard_waiting_for(tmp_path, smi, timeout=5, gpus=gpus)()] == [0, 1]


def test_the_guard_of_a_server_owning_some_gpus_names_only_those_still_in_use(tmp_path):
    with pytest.raises(GuardError, match='^GPU memory still in use: GPU 1 20610 MiB$'):
        guard_waiting_for(tmp_path, Smi(TWO_BUSY), gpus=['1'])()


def test_the_guard_refuses_a_gpu_of_its_server_that_the_machine_no_longer_lists(tmp_path):
    with pytest.raises(GuardError, match='GPU\\(s\\) GPU-z of this server not listed by nvidia-smi'):
        guard_waiting_for(tmp_path, Smi(TWO_FREE), gpus=['0', 'GPU-z'])()
