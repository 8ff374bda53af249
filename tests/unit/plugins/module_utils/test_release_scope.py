"""gpu_release scoped to a server's GPUs (the gpus option, issue 44): the driver's information, which holders a release
of some GPUs ends, and a proof that covers those GPUs alone and is stronger than memory."""
import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandError, CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import (
    MIB,
    OTHER_GPUS,
    SHARED_ONLY,
    MemoryReader,
    NvmlReader,
    own_processes,
    scope_reason,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import (
    FreeMemoryProof,
    GpuReader,
    NvidiaSmiError,
    ScopeError,
    bus_key,
    gpu_entry_problems,
    parse_gpu_compute_apps,
    parse_information,
    parse_locations,
    read_driver_information,
    resolve_gpus,
)
from helpers.fake_nvml import FakeNvml

# /proc/driver/nvidia/gpus/0000:18:00.0/information as the 580 driver writes it (keys, a colon, tabs and spaces).
INFORMATION = ('Model: \t\t NVIDIA H200\nIRQ:   \t\t 310\nGPU UUID: \t GPU-4b5c2a41-93c7-4f1e-8d0a-5b6c7d8e9f01\n'
               'Video BIOS: \t 96.00.af.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n'
               'Bus Location: \t 0000:18:00.0\nDevice Minor: \t 3\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n')
LOCATIONS = [{'index': 0, 'uuid': 'GPU-a', 'bus_id': '0000:18:00.0'},
             {'index': 1, 'uuid': 'GPU-b', 'bus_id': '0000:2a:00.0'}]
# The minor need not be the index: GPU 0 is /dev/nvidia1 here.
INFO = [{'bus_id': '0000:18:00.0', 'minor': 1, 'uuid': 'GPU-a', 'path': '/i/0000:18:00.0/information'},
        {'bus_id': '0000:2a:00.0', 'minor': 0, 'uuid': 'GPU-b', 'path': '/i/0000:2a:00.0/information'}]


def test_the_driver_information_gives_the_minor_uuid_and_bus():
    assert parse_information(INFORMATION) == {
        'minor': 3, 'uuid': 'GPU-4b5c2a41-93c7-4f1e-8d0a-5b6c7d8e9f01', 'bus_id': '0000:18:00.0'}
    assert parse_information('Model: \t\t NVIDIA H200\nDevice Minor: \t ?\n') == {
        'minor': None, 'uuid': None, 'bus_id': None}


@pytest.mark.parametrize('spelling, key', [
    ('00000000:18:00.0', '0000:18:00.0'),   # nvidia-smi's pci.bus_id, NVML's busId
    ('0000:18:00.0', '0000:18:00.0'),       # the driver's folder and its Bus Location line
    ('00000000:AB:00.0', '0000:ab:00.0'),
    ('00000001:AB:00.0', '0001:ab:00.0'),
])
def test_every_spelling_of_a_bus_id_has_one_key(spelling, key):
    assert bus_key(spelling) == key


def test_the_information_folder_is_read_per_gpu_and_a_missing_one_is_said(tmp_path):
    folder = tmp_path / '0000:18:00.0'
    folder.mkdir()
    (folder / 'information').write_text(INFORMATION.replace('Bus Location: \t 0000:18:00.0\n', ''))
    (tmp_path / 'not-a-gpu').mkdir()
    assert read_driver_information(str(tmp_path)) == [{
        'minor': 3, 'uuid': 'GPU-4b5c2a41-93c7-4f1e-8d0a-5b6c7d8e9f01', 'bus_id': '0000:18:00.0',
        'path': str(folder / 'information')}]
    with pytest.raises(ScopeError, match='cannot be listed .* does driver_info point elsewhere'):
        read_driver_information(str(tmp_path / 'absent'))


def test_locations_and_compute_apps_parse_what_nvidia_smi_prints():
    assert parse_locations('0, GPU-a, 00000000:18:00.0\n1, GPU-b, 00000000:2A:00.0\n') == LOCATIONS
    with pytest.raises(NvidiaSmiError, match='unparsable .*: 0, GPU-a, \\[N/A\\]'):
        parse_locations('0, GPU-a, [N/A]\n')
    apps = parse_gpu_compute_apps('436, python3, 20610, GPU-a\n437, my, odd name, [N/A], GPU-b\n')
    assert apps == [{'pid': 436, 'process_name': 'python3', 'used_memory_mib': 20610, 'gpu_uuid': 'GPU-a'},
                    {'pid': 437, 'process_name': 'my, odd name', 'used_memory_mib': None, 'gpu_uuid': 'GPU-b'}]
    assert parse_gpu_compute_apps('No running processes found\n') == []
    with pytest.raises(NvidiaSmiError, match='unparsable'):
        parse_gpu_compute_apps('436, python3, 20610\n')     # no gpu_uuid: an older query, not this one


@pytest.mark.parametrize('entries, problems', [
    (['0', '1', 'GPU-4b5c2a41-93c7'], []),
    (['0', 'gpu0'], ["'gpu0' is neither a GPU index"]),
    (['MIG-4b5c2a41'], ["'MIG-4b5c2a41' is neither"]),
    (['1', '1'], ['1 named more than once']),
])
def test_gpu_entries_are_indices_or_uuids_each_once(entries, problems):
    found = gpu_entry_problems(entries)
    assert len(found) == len(problems) and all(found[n].startswith(problems[n]) for n in range(len(problems)))


@pytest.mark.parametrize('wanted, resolved', [
    (['0'], [(0, 'GPU-a', 1)]),
    (['GPU-b'], [(1, 'GPU-b', 0)]),
    (['1', '0'], [(1, 'GPU-b', 0), (0, 'GPU-a', 1)]),
])
def test_each_gpu_gets_the_minor_of_its_bus_never_its_index(wanted, resolved):
    assert [(gpu['index'], gpu['uuid'], gpu['minor']) for gpu in resolve_gpus(wanted, LOCATIONS, INFO)] == resolved


@pytest.mark.parametrize('wanted, info, message', [
    (['2'], INFO, 'GPU 2 is not on this machine. This machine has 0 GPU-a (bus 0000:18:00.0), 1 GPU-b'),
    (['GPU-c'], INFO, 'GPU GPU-c is not on this machine'),
    (['1'], INFO[:1], 'GPU 1 (bus 0000:2a:00.0) has no driver information'),
    (['0'], [dict(INFO[0], minor=None)] + INFO[1:], 'has no "Device Minor" line in /i/0000:18:00.0/information'),
    (['0'], [dict(INFO[0], uuid='GPU-z')] + INFO[1:], 'GPU 0 is GPU-a to nvidia-smi but GPU-z in /i/'),
])
def test_a_gpu_that_cannot_be_told_apart_is_refused_with_what_the_machine_has(wanted, info, message):
    with pytest.raises(ScopeError) as error:
        resolve_gpus(wanted, LOCATIONS, info)
    assert message in str(error.value) and 'its driver information lists bus' in str(error.value)


OWN_GPU, OTHER_GPU = '/dev/nvidia1', '/dev/nvidia0'
SHARED = ['/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-caps/nvidia-cap1']


@pytest.mark.parametrize('devices, own, reason', [
    ([OWN_GPU] + SHARED, False, None),                 # a holder of the released GPU: ended
    ([OWN_GPU], True, None),
    ([OTHER_GPU] + SHARED, False, OTHER_GPUS),         # a neighbour
    ([OWN_GPU, OTHER_GPU], False, OTHER_GPUS),         # on both: not this release's to end
    ([OWN_GPU, OTHER_GPU], True, OTHER_GPUS),          # even if the stopping server's (it spans a neighbour's GPU)
    (SHARED, False, SHARED_ONLY),                      # could be anyone's
    (['/dev/nvidiactl'], True, None),                  # the stopping server's own
    (['/dev/nvidia-caps/nvidia-cap2'], False, SHARED_ONLY),
])
def test_which_holders_a_release_of_some_gpus_ends(devices, own, reason):
    assert scope_reason(devices, {1}, own) == reason


def test_the_stopping_server_is_its_pids_their_descendants_and_their_sessions():
    # 100 the server (session 100) -> 101 scheduler -> 102 its worker; 200 an orphan of session 100 (re-parented to
    # 1); 300 a neighbour; 400 a process of the caller's own session 50, which the server was also started from.
    parents = {100: 1, 101: 100, 102: 101, 200: 1, 300: 1, 400: 1, 500: 1, 501: 500}
    sessions = {100: 100, 101: 100, 102: 100, 200: 100, 300: 300, 400: 50, 500: 50, 501: 50}
    assert own_processes([100], parents, sessions, own_session=50) == {100, 101, 102, 200}
    # a server in the caller's session: its descendants only, never the whole session
    assert own_processes([500], parents, sessions, own_session=50) == {500, 501}
    assert own_processes([], parents, sessions, own_session=50) == set()


class Smi(object):
    """nvidia-smi as a standard-library runner: memory readings and compute-app listings, each the next answer."""

    def __init__(self, memory, apps=('',)):
        self.memory, self.apps = list(memory), list(apps)
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(argv[1])
        answers = self.memory if argv[1].startswith('--query-gpu') else self.apps
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer if isinstance(answer, tuple) else (0, answer, '')


GPU1_BUSY = '0, GPU-a, 0, 143771\n1, GPU-b, 20610, 143771\n'
GPU0_BUSY = '0, GPU-a, 20610, 143771\n1, GPU-b, 0, 143771\n'


def scoped_proof(smi, scope=(0,)):
    reader = GpuReader(CommandRunner.over(smi, 30), '/usr/bin/nvidia-smi')
    return FreeMemoryProof(reader, 0, list(scope), scope=list(scope),
                           processes=lambda: [app for app in reader.gpu_compute_apps() if app['gpu_uuid'] == 'GPU-a'])


def test_the_scoped_proof_ignores_a_neighbours_gpu():
    proof = scoped_proof(Smi([GPU1_BUSY]))
    proof.wait(1)
    assert proof.proven() and proof.busy() == [] and proof.apps_left == []
    unscoped = FreeMemoryProof(GpuReader(CommandRunner.over(Smi([GPU1_BUSY]), 30), '/usr/bin/nvidia-smi'), 0, [0, 1])
    unscoped.read()
    assert not unscoped.free()


def test_the_scoped_proof_waits_for_the_last_compute_app_after_the_memory_reads_free():
    smi = Smi([GPU0_BUSY, GPU1_BUSY], apps=['436, python3, 0, GPU-a\n437, python3, 20610, GPU-b\n',
                                            '437, python3, 20610, GPU-b\n'])
    proof = scoped_proof(smi)
    proof.wait(5)
    assert proof.proven()
    # memory busy (no listing asked), memory free with pid 436 left, free with only GPU 1's app
    assert smi.calls == ['--query-gpu=index,uuid,memory.used,memory.total'] + [
        '--query-gpu=index,uuid,memory.used,memory.total',
        '--query-compute-apps=pid,process_name,used_memory,gpu_uuid'] * 2


@pytest.mark.parametrize('apps, why', [
    ('436, python3, 0, GPU-a\n', 'an app left at 0 MiB'),
    ((6, 'Failed to initialize NVML', ''), 'a listing that fails'),
])
def test_free_memory_is_no_proof_while_an_app_is_left_or_cannot_be_listed(apps, why):
    proof = scoped_proof(Smi([GPU1_BUSY], apps=[apps]))
    proof.wait(0.1)
    assert proof.free() and not proof.proven(), why


def test_a_hung_listing_ends_the_wait_like_a_hung_reading():
    smi = Smi([GPU1_BUSY], apps=[(124, '', '')])
    proof = scoped_proof(smi)
    proof.wait(60)
    assert isinstance(proof.timed_out, CommandError) and not proof.proven()
    assert len(smi.calls) == 2     # one reading, one listing: nothing more is asked of a hung driver


def test_nvml_locates_the_gpus_and_lists_their_compute_processes():
    nvml = FakeNvml([[0], [0]], processes={1: [[(4711, 530 * MIB), (4712, None)]]})
    reader = NvmlReader.open(5, nvml)
    assert reader.locations() == [{'index': 0, 'uuid': 'GPU-0', 'bus_id': '0000:18:00.0'},
                                  {'index': 1, 'uuid': 'GPU-1', 'bus_id': '0000:2a:00.0'}]
    assert reader.gpu_compute_apps() == [
        {'pid': 4711, 'process_name': None, 'gpu_uuid': 'GPU-1', 'used_memory_mib': 530},
        {'pid': 4712, 'process_name': None, 'gpu_uuid': 'GPU-1', 'used_memory_mib': None}]


def test_compute_processes_come_from_nvidia_smi_where_nvml_cannot_list_them():
    nvml = FakeNvml([[0]], processes_error='Not Supported')
    smi = GpuReader(CommandRunner.over(Smi([GPU1_BUSY], apps=['436, python3, 0, GPU-a\n']), 30), '/usr/bin/nvidia-smi')
    assert [app['pid'] for app in MemoryReader(NvmlReader.open(5, nvml), smi).gpu_compute_apps()] == [436]
    with pytest.raises(NvidiaSmiError, match='NVML could not list the compute processes: Not Supported'):
        MemoryReader(NvmlReader.open(5, nvml), None).gpu_compute_apps()
