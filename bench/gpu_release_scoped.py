#!/usr/bin/env python3
"""gpu_release with `gpus` on a real machine of two GPUs or more: GPU 0's holder ends, GPU 1's keeps its memory.

    OUT=/tmp/out python3 bench/gpu_release_scoped.py                 (on a GPU host with torch, never in CI)
    OUT=/tmp/out python3 bench/gpu_release_scoped.py --simulated     (anywhere: the nvidia-smi simulator's GPUs)

Two torch holders (tests/gpu/torch_holder.py), one on each of GPU 0 and GPU 1 (CUDA_VISIBLE_DEVICES set to the
GPU's UUID, CUDA_DEVICE_ORDER=PCI_BUS_ID), then the module's own release code (domain/_release.GpuRelease, what
gpu_release and sglang_server's `release` run) with gpus [0], once per memory reader (NVML where nvidia-ml-py is
installed, and nvidia-smi), GPU 0's holder started afresh each round. Each round checks: GPU 0's holder was the one
process signalled and is gone, GPU 1's holder is alive, spared as `other GPUs` (its `why`), and GPU 1 still reads the
memory it held; the scope's device minor is the driver's (/proc/driver/nvidia/gpus/*/information). What device
files each holder had open is recorded first: the scoping rests on a CUDA process opening only its own GPU's
/dev/nvidiaN. Writes $OUT/gpu_release_scoped.json and exits 1 when a check fails.

Self-contained: no network, no Ansible (the module's code is run in this process with a small stand-in for the
AnsibleModule's run_command), torch only on the real path.
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h200_release import gone  # noqa: E402  (dead or a zombie)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLDER = os.path.join(REPO, 'tests', 'gpu', 'torch_holder.py')
HELD_GIB = (4, 6)


def importable():
    """gpuops.sglang as ansible_collections.gpuops.sglang from this checkout, as tests/conftest.py makes it."""
    root = tempfile.mkdtemp(prefix='gpuops-collections-')
    atexit.register(shutil.rmtree, root, True)
    os.makedirs(os.path.join(root, 'ansible_collections', 'gpuops'))
    os.symlink(REPO, os.path.join(root, 'ansible_collections', 'gpuops', 'sglang'))
    sys.path.insert(0, root)


class Host:
    """The few AnsibleModule methods GpuRelease uses: commands (argv lists, never a shell), binaries, messages."""

    def __init__(self):
        self.messages = []

    def get_bin_path(self, name, required=False):
        return shutil.which(name)

    def run_command(self, argv, environ_update=None, cwd=None, data=None, binary_data=False):
        done = subprocess.run(argv, env=dict(os.environ, **(environ_update or {})), cwd=cwd, input=data,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return done.returncode, done.stdout.decode('utf-8', 'replace'), done.stderr.decode('utf-8', 'replace')

    def warn(self, message):
        self.messages.append('warning: %s' % message)

    def debug(self, message):
        self.messages.append('debug: %s' % message)


def device_files(pid):
    """The /dev/nvidia* files pid has open."""
    found = set()
    fd_dir = '/proc/%d/fd' % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if os.path.basename(target).startswith('nvidia'):
            found.add(target)
    return sorted(found)


def alive(pid):
    return not gone(pid)


class RealGpus:
    """Torch holders on the real GPUs, read with the real nvidia-smi; the module's defaults for the rest."""

    name = 'real'

    def __init__(self):
        if not shutil.which('nvidia-smi'):
            raise SystemExit('nvidia-smi is not on PATH: run this on a GPU host, or with --simulated')
        out = subprocess.check_output(['nvidia-smi', '--query-gpu=index,uuid,pci.bus_id',
                                       '--format=csv,noheader,nounits'], universal_newlines=True)
        self.gpus = [[cell.strip() for cell in line.split(',')] for line in out.strip().splitlines()]
        self.procs = []
        self.options = {}

    def start(self, index, gib):
        flag = os.path.join(tempfile.gettempdir(), 'scoped-holder-%d-%d' % (os.getpid(), len(self.procs)))
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=self.gpus[index][1], CUDA_DEVICE_ORDER='PCI_BUS_ID')
        proc = subprocess.Popen([sys.executable, HOLDER, str(gib), 'exit', flag], env=env)
        self.procs.append(proc)
        deadline = time.monotonic() + 120
        while not os.path.exists(flag):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit('the torch holder on GPU %d did not start' % index)
            time.sleep(0.05)
        os.unlink(flag)
        return proc.pid

    def used(self):
        out = subprocess.check_output(['nvidia-smi', '--query-gpu=index,memory.used', '--format=csv,noheader,nounits'],
                                      universal_newlines=True)
        return [int(line.split(',')[1]) for line in out.strip().splitlines()]

    def apps(self):
        return subprocess.check_output(['nvidia-smi', '--query-compute-apps=pid,process_name,used_memory,gpu_uuid',
                                        '--format=csv,noheader,nounits'], universal_newlines=True).strip().splitlines()

    def readers(self):
        try:
            import pynvml  # noqa: F401  (only whether it is there)
            return ['auto', 'nvidia-smi']
        except ImportError:
            return ['nvidia-smi']

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


class SimulatedGpus(RealGpus):
    """The same rounds on the nvidia-smi simulator's two GPUs (tests/helpers/simulated.py), GPU 0 as /dev/nvidia1:
    a check of this script, not a measurement."""

    name = 'simulated'

    def __init__(self):
        sys.path.insert(0, os.path.join(REPO, 'tests'))
        from helpers.simulated import SimulatedGpuHost
        from pathlib import Path
        folder = tempfile.mkdtemp(prefix='scoped-sim-')
        atexit.register(shutil.rmtree, folder, True)
        self.host = SimulatedGpuHost(Path(folder))
        self.options = {'devices': self.host.device_globs, 'nvidia_smi': self.host.nvidia_smi,
                        'driver_info': self.host.write_driver_information([1, 0])}
        self.gpus = [row for row in self.host.query('gpu=index,uuid,pci.bus_id')]

    def start(self, index, gib):
        return self.host.start('python3 torch_holder.py', hold=[(index, gib * 1024)],
                               open_=['nvidiactl', 'nvidia-uvm']).inner_pid

    def used(self):
        return self.host.gpus()

    def apps(self):
        return [', '.join(row) for row in self.host.query('compute-apps=pid,process_name,used_memory,gpu_uuid')]

    def readers(self):
        return ['nvidia-smi']

    def stop(self):
        self.host.stop_all()


def release(options, reader):
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import Renewer
    from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import (
        RELEASE_SPEC, GpuRelease, ReleaseFailed, Timeline, empty_result)
    params = {name: spec.get('default') for name, spec in RELEASE_SPEC.items()}
    params.update(options, gpus=['0'], term_timeout=5.0, memory_timeout=30.0, max_used_mib=64, memory_reader=reader)
    result = dict(empty_result(), changed=False, failed=False)
    host = Host()
    started = time.monotonic()
    try:
        GpuRelease(host, params, False, Timeline()).run(result, [], Renewer.from_option(None, 'bench'))
    except ReleaseFailed as exc:
        result.update(failed=True, msg=str(exc))
    result['wall_s'] = round(time.monotonic() - started, 3)
    result['messages'] = host.messages
    return result


def round_checks(result, first, second, held_before, held_after):
    """What must hold after a release of GPU 0 alone, as (name, passed)."""
    spared = {entry['pid']: entry['why'] for entry in result['spared']}
    return [
        ('release succeeded', not result['failed']),
        ('only GPU 0 holder signalled', [entry['pid'] for entry in result['killed']] == [first]),
        ('GPU 0 holder gone', not alive(first)),
        ('GPU 1 holder alive', alive(second)),
        ('GPU 1 holder spared as other GPUs', spared.get(second) == 'other GPUs'),
        ('GPU 1 memory kept', held_after[1] >= held_before[1] - 64 and held_before[1] >= 1024),
        ('GPU 0 memory freed', held_after[0] <= 64),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--simulated', action='store_true', help="the nvidia-smi simulator's GPUs, not real ones")
    parser.add_argument('--rounds', type=int, default=2, help='rounds per memory reader')
    args = parser.parse_args()
    importable()
    out = os.environ.get('OUT', os.path.join(REPO, 'gpu-check-out'))
    os.makedirs(out, exist_ok=True)
    gpus = SimulatedGpus() if args.simulated else RealGpus()
    report = {'gpus': gpus.gpus, 'kind': gpus.name, 'rounds': []}
    failed = False
    try:
        if len(gpus.gpus) < 2:
            raise SystemExit('this machine has %d GPU(s): the scoped release needs two or more' % len(gpus.gpus))
        second = gpus.start(1, HELD_GIB[1])
        for reader in gpus.readers():
            for number in range(args.rounds):
                first = gpus.start(0, HELD_GIB[0])
                row = {'reader': reader, 'round': number, 'holders': {'gpu0': first, 'gpu1': second},
                       'devices': {'gpu0': device_files(first), 'gpu1': device_files(second)},
                       'apps_before': gpus.apps()}
                row['used_before'] = gpus.used()
                result = release(gpus.options, reader)
                row['used_after'] = gpus.used()
                row['checks'] = dict(round_checks(result, first, second, row['used_before'], row['used_after']))
                row['result'] = result
                report['rounds'].append(row)
                failed = failed or not all(row['checks'].values())
                print('%s %-10s round %d: %s; elapsed %.3f s (wall %.3f s), reader %s, scope %s, used %s -> %s MiB%s'
                      % (gpus.name, reader, number, 'ok' if all(row['checks'].values()) else 'FAILED ' + ', '.join(
                          name for name, passed in row['checks'].items() if not passed), result['elapsed'],
                         result['wall_s'], result['memory_reader'],
                         [(gpu['index'], gpu['minor']) for gpu in result['scope']], row['used_before'],
                         row['used_after'], '' if not result['failed'] else '\n  ' + result.get('msg', '')),
                      flush=True)
                print('  devices held: GPU 0 holder %s; GPU 1 holder %s' % (row['devices']['gpu0'],
                                                                           row['devices']['gpu1']), flush=True)
                if alive(first):
                    os.kill(first, 9)
    finally:
        gpus.stop()
        with open(os.path.join(out, 'gpu_release_scoped.json'), 'w') as handle:
            json.dump(report, handle, indent=1)
    print('wrote %s' % os.path.join(out, 'gpu_release_scoped.json'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
