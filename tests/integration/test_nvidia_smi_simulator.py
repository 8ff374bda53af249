"""The lab's nvidia-smi simulator counts what live holders hold, as the driver does (lab/simulators/README.md)."""
import json
import os
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import read_proc_record
from helpers.simulated import SimulatedGpuHost

SCHEDULER_MIB = 20610
# Longer than release_delay (0.15 s) plus the holders' heartbeat (0.05 s, lab/simulators/allocations.py):
# a holder dead for that long has had its memory freed by the simulated driver, however slow the machine.
FREED_AFTER_S = 0.5


@pytest.fixture
def gpu_host(tmp_path, request):
    host = SimulatedGpuHost(tmp_path, gpus=1, **getattr(request, 'param', {}))
    yield host
    host.stop_all()


def start_scheduler(host, **extra):
    return host.start('sglang::scheduler_TP0', hold=[(0, SCHEDULER_MIB)], **extra)


def test_a_restarted_server_is_counted_once_not_with_its_dead_earlier_lives(gpu_host):
    # Six restarts with nobody asking nvidia-smi in between, as when a guard or a test restarts the server:
    # the first reading after them used to count every dead scheduler too (7 x 20610 = 144270 MiB of 143771).
    for _ in range(6):
        earlier = start_scheduler(gpu_host)
        earlier.kill()
        earlier.wait()
    time.sleep(FREED_AFTER_S)
    live = start_scheduler(gpu_host)
    assert gpu_host.gpus() == [SCHEDULER_MIB]
    assert gpu_host.compute_apps() == [(live.inner_pid, SCHEDULER_MIB)]


def test_a_reused_pid_is_not_the_holder_that_registered_it(gpu_host):
    # A process that holds the device but registered nothing, and a record left under its PID by the process
    # that had that PID before (another start time, last alive long ago): it holds no memory.
    reuser = gpu_host.start('python3 cuda_probe.py', open_=['nvidia0'])
    record = gpu_host.state / 'alloc' / ('%d-0' % reuser.inner_pid)
    record.parent.mkdir(exist_ok=True)
    earlier_start = read_proc_record(reuser.inner_pid).start_time - 1
    record.write_text(json.dumps({'mib': SCHEDULER_MIB, 'start_time': earlier_start}))
    an_hour_ago = time.time() - 3600
    os.utime(str(record), (an_hour_ago, an_hour_ago))
    assert gpu_host.gpus() == [0]
    assert gpu_host.compute_apps() == []


@pytest.mark.parametrize('gpu_host', [{'release_delay': 60}], indirect=True)
def test_a_killed_holders_memory_stays_counted_for_the_release_delay_but_it_is_not_listed(gpu_host):
    holder = start_scheduler(gpu_host)
    holder.kill()
    holder.wait()
    assert gpu_host.gpus() == [SCHEDULER_MIB]
    assert gpu_host.compute_apps() == []
