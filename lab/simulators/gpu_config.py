#!/usr/bin/env python3
"""The simulated GPUs (gpus.json) and the driver's per-GPU information files, one format in one place.

$NVIDIA_SMI_SIM_STATE/gpus.json (default /var/lib/nvidia-smi-sim):
  {"release_delay": 0.15, "information_dir": DIR,
   "gpus": [{"index", "uuid", "total_mib", "device", "leak_mib", "bus_id", "minor"}]}
index is nvidia-smi's (PCI bus order); device the /dev/nvidiaN file a holder of this GPU keeps open, N its
minor number; bus_id as nvidia-smi prints pci.bus_id (00000000:18:00.0). A configuration without bus_id or
minor (the tests' older set-ups) gets them from the index.

The real driver writes /proc/driver/nvidia/gpus/<bus id>/information (bus id as 0000:18:00.0) with, among other
lines, "Device Minor: N": the only place that ties a GPU to its /dev/nvidiaN. No lab host can write under
/proc, so the simulator writes the same files under information_dir (the lab:
/var/lib/nvidia-smi-sim/driver/nvidia/gpus), whatever reads them being pointed there.

  gpu_config.py --state DIR --gpus N   writes gpus.json for N GPUs and their information files (the lab's set-up)
  gpu_config.py --state DIR            writes the information files of an existing gpus.json
"""
import argparse
import json
import os

STATE = os.environ.get('NVIDIA_SMI_SIM_STATE', '/var/lib/nvidia-smi-sim')
TOTAL_MIB = 143771
# PCI buses of an 8-GPU HGX board: nvidia-smi's index follows the bus order, the minor need not.
BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def nvidia_smi_bus_id(index):
    return '00000000:%02X:00.0' % BUSES[index % len(BUSES)]


def proc_bus_id(bus_id):
    """The driver's folder name for nvidia-smi's bus id: a 4-digit domain, lower case (0000:18:00.0)."""
    domain, rest = bus_id.split(':', 1)
    return ('%04x:%s' % (int(domain, 16), rest)).lower()


def normalised(gpu):
    """A GPU record with bus_id and minor, from its index where the configuration leaves them out."""
    return dict(gpu, bus_id=gpu.get('bus_id') or nvidia_smi_bus_id(gpu['index']),
                minor=gpu['index'] if gpu.get('minor') is None else gpu['minor'])


def load(state=None):
    with open(os.path.join(state or STATE, 'gpus.json')) as handle:
        config = json.load(handle)
    config['gpus'] = [normalised(gpu) for gpu in config['gpus']]
    return config


def information_text(gpu):
    """The information file as the driver writes it: each key, its colon and the driver's own run of spaces and
    tabs, the value (a reader splits at the first colon and strips)."""
    lines = [('Model: \t\t ', 'NVIDIA H200 (simulated)'), ('IRQ:   \t\t ', '0'), ('GPU UUID: \t ', gpu['uuid']),
             ('Video BIOS: \t ', '96.00.00.00.01'), ('Bus Type: \t ', 'PCIe'), ('DMA Size: \t ', '52 bits'),
             ('DMA Mask: \t ', '0xfffffffffffff'), ('Bus Location: \t ', proc_bus_id(gpu['bus_id'])),
             ('Device Minor: \t ', str(gpu['minor'])), ('GPU Excluded:\t ', 'No')]
    return ''.join(key + value + '\n' for key, value in lines)


def write_information(config):
    """Writes every GPU's information file under the configuration's information_dir (none when it has none)."""
    folder = config.get('information_dir')
    if not folder:
        return
    for gpu in config['gpus']:
        path = os.path.join(folder, proc_bus_id(gpu['bus_id']), 'information')
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + '.tmp', 'w') as handle:
            handle.write(information_text(gpu))
        os.rename(path + '.tmp', path)


def lab_config(state, count):
    """N GPUs as the lab's hosts have them: /dev/nvidiaK with minor K, distinct UUIDs and buses."""
    return {'release_delay': 0.15, 'information_dir': os.path.join(state, 'driver', 'nvidia', 'gpus'),
            'gpus': [{'index': k, 'uuid': 'GPU-lab0000-0000-0000-0000-%012d' % k, 'total_mib': TOTAL_MIB,
                      'device': '/dev/nvidia%d' % k, 'leak_mib': 0, 'bus_id': nvidia_smi_bus_id(k), 'minor': k}
                     for k in range(count)]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--state', default=STATE)
    parser.add_argument('--gpus', type=int)
    args = parser.parse_args(argv)
    if args.gpus is not None:
        os.makedirs(args.state, exist_ok=True)
        path = os.path.join(args.state, 'gpus.json')
        with open(path + '.tmp', 'w') as handle:
            json.dump(lab_config(args.state, args.gpus), handle, indent=1)
        os.rename(path + '.tmp', path)
    write_information(load(args.state))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
