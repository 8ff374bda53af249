#!/usr/bin/env python3
"""The GPU memory an idle GPU reports, the evidence behind sglang_gpu_max_used_mib's default.

On a host with NVIDIA GPUs and torch (the device tool's machine), never in CI:
    python3 bench/gpu_idle_memory.py [--rounds 10]

Reads memory.used with nvidia-smi (what gpu_release parses) and NVML (v1 and v2 where the binding has it):
idle, while a torch process holds a CUDA context plus 1 GiB or plus one byte, and after each such process
(ROUNDS of each) has exited, once nvidia-smi lists no compute process. Prints one JSON line per reading and a summary: the largest idle and
after-exit readings per GPU, the figure the threshold must stay above.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

HOLDER = ('import torch, sys; x = torch.empty(%d, dtype=torch.uint8, device="cuda:%d"); '
          'torch.cuda.synchronize(); print("held", flush=True); sys.stdin.read()')
# A holder of 1 GiB, and the smallest one there is (a CUDA context and one byte): the threshold must stay below it.
HOLDS = (('held_1gib', 1 << 30), ('held_context_only', 1))


def smi(*query: str) -> list[list[str]]:
    out = subprocess.run(['nvidia-smi', '--query-%s=%s' % query, '--format=csv,noheader,nounits'],
                         check=True, capture_output=True, text=True, env={'LANG': 'C', 'PATH': '/usr/bin:/bin'}).stdout
    return [[cell.strip() for cell in line.split(',')] for line in out.splitlines() if line.strip()]


def nvml_used() -> dict[int, dict[str, int]]:
    try:
        import pynvml
    except ImportError:
        return {}
    pynvml.nvmlInit()
    try:
        found = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            found[index] = {'nvml_v1_mib': pynvml.nvmlDeviceGetMemoryInfo(handle).used >> 20}
            try:
                info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                found[index]['nvml_v2_mib'] = info.used >> 20
            except Exception:  # an older binding or driver: v1 only
                pass
        return found
    finally:
        pynvml.nvmlShutdown()


def reading(label: str) -> list[dict]:
    nvml = nvml_used()
    rows = []
    for index, used, total, name in smi('gpu', 'index,memory.used,memory.total,name'):
        row = dict(label=label, gpu=int(index), name=name, smi_used_mib=int(used), total_mib=int(total))
        row.update(nvml.get(int(index), {}))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def wait_no_compute_process(deadline_s: float = 30.0) -> float:
    started = time.monotonic()
    while smi('compute-apps', 'pid'):
        if time.monotonic() - started > deadline_s:
            raise SystemExit('a compute process is still listed after %gs' % deadline_s)
        time.sleep(0.02)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--rounds', type=int, default=10)
    parser.add_argument('--idle-reads', type=int, default=20)
    args = parser.parse_args()
    wait_no_compute_process()
    rows = [row for _ in range(args.idle_reads) for row in reading('idle')]
    for label, size in [hold for hold in HOLDS for _ in range(args.rounds)]:
        holder = subprocess.Popen([sys.executable, '-c', HOLDER % (size, 0)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == 'held'
        rows.extend(reading(label))
        holder.stdin.close()
        holder.wait(timeout=60)
        wait_no_compute_process()
        rows.extend(reading('after_exit'))
    summary = {}
    for row in rows:
        key = '%s gpu%d' % (row['label'], row['gpu'])
        low, high = summary.get(key, (row['smi_used_mib'], row['smi_used_mib']))
        summary[key] = (min(low, row['smi_used_mib']), max(high, row['smi_used_mib']))
    print(json.dumps({'smi_used_mib_min_max': summary, 'name': rows[0]['name']}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
