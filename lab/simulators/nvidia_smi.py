#!/usr/bin/env python3
"""nvidia-smi SIMULATOR for tests and the lab (see README.md beside it).

Implements only:
  --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits
  --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits
State lives in $NVIDIA_SMI_SIM_STATE (default /var/lib/nvidia-smi-sim):
  gpus.json   {"gpus": [{"index", "uuid", "total_mib", "device", "leak_mib"}], "release_delay": 0.15}
  fail        if present, its text is printed and the exit status is 9 (driver unreachable)
  alloc/PID-INDEX   what process PID holds on GPU INDEX (written by gpu_holder.py; format in allocations.py)
"""
import json
import os
import sys
import time

from allocations import HEARTBEAT, discard, records
from procfs import live_start_time

STATE = os.environ.get('NVIDIA_SMI_SIM_STATE', '/var/lib/nvidia-smi-sim')
GPU_QUERY = '--query-gpu=index,uuid,memory.used,memory.total'
APPS_QUERY = '--query-compute-apps=pid,process_name,used_memory'
CSV = '--format=csv,noheader,nounits'


def load():
    with open(os.path.join(STATE, 'gpus.json')) as handle:
        return json.load(handle)


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


def main(argv):
    fail = os.path.join(STATE, 'fail')
    if os.path.exists(fail):
        with open(fail) as handle:
            sys.stdout.write(handle.read())
        return 9
    if CSV not in argv or len(argv) != 2:
        sys.stderr.write('nvidia-smi simulator: only %s and %s with %s are simulated\n' % (GPU_QUERY, APPS_QUERY, CSV))
        return 2
    config = load()
    counted = allocations(config)
    if GPU_QUERY in argv:
        for gpu in config['gpus']:
            used = gpu.get('leak_mib', 0) + sum(mib for _, index, mib, _ in counted if index == gpu['index'])
            print('%d, %s, %d, %d' % (gpu['index'], gpu['uuid'], used, gpu['total_mib']))
        return 0
    if APPS_QUERY in argv:
        for pid, _, mib, live in counted:
            if live:
                print('%d, %s, %d' % (pid, comm(pid), mib))
        return 0
    sys.stderr.write('nvidia-smi simulator: unsupported query %r\n' % argv)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
