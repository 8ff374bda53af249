#!/usr/bin/env python3
"""nvidia-smi SIMULATOR for tests and the lab (see README.md beside it).

Implements only the CSV queries, fields in any order:
  --query-gpu=FIELDS --format=csv,noheader,nounits           FIELDS of index, uuid, pci.bus_id, memory.used,
                                                              memory.total
  --query-compute-apps=FIELDS --format=csv,noheader,nounits  FIELDS of pid, process_name, used_memory, gpu_uuid,
                                                              gpu_bus_id (one line per process and GPU it holds)
A field it does not know is refused as nvidia-smi refuses one (exit 2).
State lives in $NVIDIA_SMI_SIM_STATE (default /var/lib/nvidia-smi-sim):
  gpus.json   the GPUs (format in gpu_config.py: index, uuid, bus id, device file and its minor, total, leak)
  fail        if present, its text is printed and the exit status is 9 (driver unreachable)
  alloc/PID-INDEX   what process PID holds on GPU INDEX (written by gpu_holder.py; format in allocations.py)
A GPU's memory is only what live holders of ITS device file registered: a process holding another GPU's file,
or only the shared ones (nvidiactl, nvidia-uvm, caps), adds nothing to it.
"""
import os
import sys
import time

from allocations import HEARTBEAT, discard, records
from gpu_config import STATE, load
from procfs import live_start_time

CSV = '--format=csv,noheader,nounits'
GPU_FIELDS = {
    'index': lambda gpu, used: str(gpu['index']),
    'uuid': lambda gpu, used: gpu['uuid'],
    'pci.bus_id': lambda gpu, used: gpu['bus_id'],
    'memory.used': lambda gpu, used: str(used),
    'memory.total': lambda gpu, used: str(gpu['total_mib']),
}
APP_FIELDS = {
    'pid': lambda pid, gpu, mib: str(pid),
    'process_name': lambda pid, gpu, mib: comm(pid),
    'used_memory': lambda pid, gpu, mib: str(mib),
    'gpu_uuid': lambda pid, gpu, mib: gpu['uuid'],
    'gpu_bus_id': lambda pid, gpu, mib: gpu['bus_id'],
}


def holds_open(pid, device):
    fd_dir = '/proc/%d/fd' % pid
    try:
        for fd in os.listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, fd)) == device:
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def allocations(config):
    """[(pid, gpu_index, mib, live)] counted now: what live holders registered, and what a dead one held
    until release_delay after its last heartbeat (the driver frees memory a moment after its owner died)."""
    devices = dict((gpu['index'], gpu['device']) for gpu in config['gpus'])
    delay = float(config.get('release_delay', 0.15))
    now = time.time()
    counted = []
    for path, pid, index, mib, started, last_alive in records(os.path.join(STATE, 'alloc')):
        if started is not None and live_start_time(pid) == started and holds_open(pid, devices.get(index)):
            counted.append((pid, index, mib, True))
        elif delay > 0 and now < last_alive + HEARTBEAT + delay:
            counted.append((pid, index, mib, False))
        else:
            discard(path)
    return counted


def comm(pid):
    try:
        with open('/proc/%d/comm' % pid) as handle:
            return handle.read().strip()
    except OSError:
        return '[Not Found]'


def query(argv):
    """(kind, fields) of the one --query-KIND=FIELDS argument, or None."""
    for arg in argv:
        for kind in ('gpu', 'compute-apps'):
            prefix = '--query-%s=' % kind
            if arg.startswith(prefix):
                return kind, arg[len(prefix):].split(',')
    return None


def main(argv):
    fail = os.path.join(STATE, 'fail')
    if os.path.exists(fail):
        with open(fail) as handle:
            sys.stdout.write(handle.read())
        return 9
    asked = query(argv)
    if CSV not in argv or len(argv) != 2 or asked is None:
        sys.stderr.write('nvidia-smi simulator: only --query-gpu=FIELDS and --query-compute-apps=FIELDS with %s '
                         'are simulated\n' % CSV)
        return 2
    kind, fields = asked
    known = GPU_FIELDS if kind == 'gpu' else APP_FIELDS
    unknown = [field for field in fields if field not in known]
    if unknown:
        # nvidia-smi's own words for a field it does not have.
        sys.stderr.write('Field "%s" is not a valid field to query.\n\n' % unknown[0])
        return 2
    config = load()
    counted = allocations(config)
    if kind == 'gpu':
        for gpu in config['gpus']:
            used = gpu.get('leak_mib', 0) + sum(mib for _, index, mib, _ in counted if index == gpu['index'])
            print(', '.join(known[field](gpu, used) for field in fields))
        return 0
    gpus = dict((gpu['index'], gpu) for gpu in config['gpus'])
    for pid, index, mib, live in counted:
        if live:
            print(', '.join(known[field](pid, gpus[index], mib) for field in fields))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
