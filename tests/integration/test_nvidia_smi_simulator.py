"""The lab's nvidia-smi simulator counts what live holders hold, as the driver does (lab/simulators/README.md)."""
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import read_proc_record
from helpers.simulated import SIMULATORS, SimulatedGpuHost

SCHEDULER_MIB = 20610
# Longer than release_delay (0.15 s) plus the holders' heartbeat (0.05 s, lab/simulators/allocations.py):
# a holder dead for that long has had its memory freed by the simulated driver, however slow the machine.
FREED_AFTER_S = 0.5


@pytest.fixture
def gpu_host(tmp_path, request):
    host = SimulatedGpuHost(tmp_path, **dict({'gpus': 1}, **getattr(request, 'param', {})))
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


# Two GPUs, as a machine that serves two servers side by side has them (lab/lab up with LAB_COLOCATED=1).
@pytest.mark.parametrize('gpu_host', [{'gpus': 2}], indirect=True)
def test_each_gpu_counts_only_the_holders_of_its_own_device_file(gpu_host):
    first = gpu_host.start('sglang::scheduler_TP0', hold=[(0, SCHEDULER_MIB)])
    second = gpu_host.start('sglang::scheduler_TP0', hold=[(1, 4096)])
    gpu_host.start('python3 nvml_probe.py', open_=['nvidiactl', 'nvidia-uvm'])
    # A record for GPU 1 from a live process that holds only GPU 0's device file (written long ago, so not the
    # memory of a holder that just died either): not GPU 1's memory.
    stray = gpu_host.state / 'alloc' / ('%d-1' % first.inner_pid)
    stray.write_text(json.dumps({'mib': 777, 'start_time': read_proc_record(first.inner_pid).start_time}))
    an_hour_ago = time.time() - 3600
    os.utime(str(stray), (an_hour_ago, an_hour_ago))
    assert gpu_host.gpus() == [SCHEDULER_MIB, 4096]
    uuids = [row[1] for row in gpu_host.query('gpu=index,uuid,memory.used,memory.total')]
    apps = gpu_host.query('compute-apps=pid,used_memory,gpu_uuid,gpu_bus_id')
    buses = [row[0] for row in gpu_host.query('gpu=pci.bus_id')]
    assert sorted(apps) == sorted([[str(first.inner_pid), str(SCHEDULER_MIB), uuids[0], buses[0]],
                                   [str(second.inner_pid), '4096', uuids[1], buses[1]]])
    assert len(set(uuids)) == 2 and len(set(buses)) == 2, (uuids, buses)


def test_a_field_nvidia_smi_does_not_have_is_refused_as_it_refuses_one(gpu_host):
    done = subprocess.run([gpu_host.nvidia_smi, '--query-gpu=index,temperature.gpu', '--format=csv,noheader,nounits'],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert (done.returncode, done.stdout) == (2, '')
    assert 'Field "temperature.gpu" is not a valid field to query.' in done.stderr


@pytest.mark.parametrize('gpu_host', [{'gpus': 2}], indirect=True)
def test_the_driver_information_files_give_each_gpu_its_device_minor(gpu_host, tmp_path):
    # The minor need not be the index: GPU 0 is /dev/nvidia1 here, GPU 1 /dev/nvidia0.
    first, second = gpu_host.config['gpus']
    first['device'], first['minor'] = second['device'], 1
    second['device'], second['minor'] = str(gpu_host.dev / 'nvidia0'), 0
    gpu_host.config['information_dir'] = str(tmp_path / 'proc-driver-nvidia-gpus')
    gpu_host.save()
    subprocess.check_call([sys.executable, os.path.join(SIMULATORS, 'gpu_config.py'), '--state', str(gpu_host.state)])
    buses = [row[0] for row in gpu_host.query('gpu=pci.bus_id')]
    minors = {}
    for folder in sorted(os.listdir(gpu_host.config['information_dir'])):
        with open(os.path.join(gpu_host.config['information_dir'], folder, 'information')) as handle:
            fields = dict(line.split(':', 1) for line in handle.read().splitlines())
        minors[folder] = (fields['GPU UUID'].strip(), int(fields['Device Minor']))
    # The driver's folder is the bus id with a 4-digit domain, in lower case.
    assert minors == {buses[0][4:].lower(): (first['uuid'], 1), buses[1][4:].lower(): (second['uuid'], 0)}
    # GPU 0's holder opens GPU 0's device file (nvidia1 here), and its memory is GPU 0's.
    holder = gpu_host.start('python3 job.py', hold=[(0, 1000)])
    fd_dir = '/proc/%d/fd' % holder.inner_pid
    held = [os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)]
    assert first['device'] in held and second['device'] not in held, held
    assert gpu_host.gpus() == [1000, 0]
