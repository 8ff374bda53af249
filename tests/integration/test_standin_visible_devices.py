"""The stand-in server holds memory on the GPUs CUDA_VISIBLE_DEVICES names, and only those, as a CUDA process does
(two servers side by side on one machine: lab/lab up with LAB_COLOCATED=1). It runs here as a plain process with a
simulated two-GPU host; its schedulers are real gpu_holder.py processes, so the memory is read from the nvidia-smi
simulator, as the redeploy reads it."""
import os
import subprocess
import sys

import pytest

from helpers.simulated import HOLDER, SimulatedGpuHost, free_port, wait_for
from helpers.standin import status, write_standin_module

MIB = 1000


@pytest.fixture
def machine(tmp_path):
    gpus = SimulatedGpuHost(tmp_path, gpus=2)
    module, pythonpath, dummy = write_standin_module(tmp_path, HOLDER, [str(gpus.dev / 'nvidiactl')])
    started = []

    def start(visible=None, tp_size=1):
        environment = dict(os.environ, PYTHONPATH=pythonpath, NVIDIA_SMI_SIM_STATE=str(gpus.state),
                           LAB_STANDIN_WARMUP='0', LAB_STANDIN_DRAIN='0', LAB_STANDIN_GPU_MIB=str(MIB))
        environment.pop('CUDA_VISIBLE_DEVICES', None)
        if visible is not None:
            environment['CUDA_VISIBLE_DEVICES'] = visible
        port = free_port()
        proc = subprocess.Popen([sys.executable, '-m', module, '--model-path', '/models/m', '--host', '127.0.0.1',
                                 '--port', str(port), '--tp-size', str(tp_size)],
                                env=environment, stderr=subprocess.PIPE, universal_newlines=True,
                                start_new_session=True)
        started.append(proc)
        proc.base = 'http://127.0.0.1:%d' % port
        return proc
    start.gpus = gpus
    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait()


def held_once_serving(machine, proc, held):
    """Waits until the stand-in serves and the GPUs read `held` (its schedulers register as they start); fails
    with what they read when they never do."""
    wait_for(lambda: status(proc.base + '/health') == 200 or proc.poll() is not None, 30, 'the stand-in to serve')
    assert proc.poll() is None, proc.stderr.read()
    try:
        wait_for(lambda: machine.gpus.gpus() == held, 10, 'GPU memory %s' % held)
    except AssertionError:
        raise AssertionError('the GPUs hold %s MiB, not %s' % (machine.gpus.gpus(), held))


def uuid_of(machine, index):
    return machine.gpus.config['gpus'][index]['uuid']


@pytest.mark.parametrize('visible, held', [
    (None, [MIB, 0]),             # today's behaviour: CUDA's device 0 is the first GPU
    ('1', [0, MIB]),
    ('GPU-sim-0001', [0, MIB]),   # a UUID, as the role sets it
    ('GPU-sim-0001,GPU-sim-0000', [0, MIB]),
])
def test_the_server_holds_memory_only_on_the_gpu_cuda_visible_devices_names(machine, visible, held):
    held_once_serving(machine, machine(visible), held)


def test_two_servers_side_by_side_each_hold_their_own_gpu(machine):
    held_once_serving(machine, machine('0'), [MIB, 0])
    held_once_serving(machine, machine(uuid_of(machine, 1)), [MIB, MIB])


def test_tensor_parallel_ranks_take_the_named_gpus_in_their_order(machine):
    held_once_serving(machine, machine('1,0', tp_size=2), [MIB, MIB])
    titles = {}
    for pid, uuid in machine.gpus.query('compute-apps=pid,gpu_uuid'):
        with open('/proc/%s/cmdline' % pid, 'rb') as handle:
            titles[handle.read().split(b'\0')[0].decode()] = uuid
    # TP0 on CUDA's device 0, which is nvidia-smi's GPU 1 here.
    assert titles == {'sglang::scheduler_TP0': uuid_of(machine, 1), 'sglang::scheduler_TP1': uuid_of(machine, 0)}


@pytest.mark.parametrize('visible', ['', '7', 'GPU-nothing', '0,0'])
def test_too_few_gpus_named_stops_the_start_as_an_invalid_device_ordinal(machine, visible):
    proc = machine(visible, tp_size=2 if visible == '0,0' else 1)
    assert proc.wait(timeout=30) == 1
    assert 'invalid device ordinal' in proc.stderr.read()
    assert machine.gpus.gpus() == [0, 0]
