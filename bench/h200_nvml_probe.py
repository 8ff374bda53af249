#!/usr/bin/env python3
"""What NVML (nvidia-ml-py) reads against nvidia-smi on a real GPU, and how fast each answers.

    OUT=/tmp/out python3 bench/h200_nvml_probe.py          (on a GPU host, never in CI)

Idle: memory used as NVML v1 and v2 memory info and nvidia-smi report it, and the latency of each
read (100 calls). Then one 20 GiB holder is SIGKILLed while NVML v2 and nvidia-smi are polled side
by side: when each first read 0 MiB. Writes $OUT/h200_nvml_probe.json.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pynvml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h200_release import gone, start_holders, used  # noqa: E402


def timed(call, count):
    times = []
    for _ in range(count):
        began = time.monotonic()
        call()
        times.append(time.monotonic() - began)
    return {'median_s': round(statistics.median(times), 4), 'max_s': round(max(times), 4)}


def main():
    out = os.environ.get('OUT', '/tmp/h200-nvml')
    began = time.monotonic()
    pynvml.nvmlInit()
    report = {'nvml_init_s': round(time.monotonic() - began, 4),
              'nvml_version': pynvml.nvmlSystemGetNVMLVersion(), 'driver': pynvml.nvmlSystemGetDriverVersion()}
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def v2():
        return [pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2) for h in handles]

    mib = 2 ** 20
    report['idle'] = {'nvidia_smi_used_mib': used(),
                      'v1_used_mib': [pynvml.nvmlDeviceGetMemoryInfo(h).used // mib for h in handles],
                      'v2_used_mib': [m.used // mib for m in v2()],
                      'v2_reserved_mib': [m.reserved // mib for m in v2()],
                      'v2_call': timed(v2, 100), 'nvidia_smi_call': timed(used, 20)}
    print(json.dumps(report), flush=True)
    releases = []
    for _ in range(3):
        procs = start_holders([(0, 20)], 'exit')
        held_v2 = [m.used // mib for m in v2()]
        started = time.monotonic()
        os.kill(procs[0].pid, signal.SIGKILL)
        seen = {}
        while len(seen) < 3 and time.monotonic() - started < 10:
            now = time.monotonic() - started
            if 'v2' not in seen and all(m.used // mib == 0 for m in v2()):
                seen['v2'] = round(now, 4)
            if 'gone' not in seen and gone(procs[0].pid):
                seen['gone'] = round(now, 4)
            if 'smi' not in seen and all(value == 0 for value in used()):
                seen['smi'] = round(time.monotonic() - started, 4)
            time.sleep(0.002)
        procs[0].wait()
        releases.append(dict(seen, held_v2_mib=held_v2))
        print(json.dumps(releases[-1]), flush=True)
    report['sigkill_20gib'] = releases
    pynvml.nvmlShutdown()
    with open(os.path.join(out, 'h200_nvml_probe.json'), 'w') as handle:
        json.dump(report, handle, indent=1)


if __name__ == '__main__':
    main()
