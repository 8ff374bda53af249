#!/bin/bash
# On a host with NVIDIA GPUs and torch (the device tool's H200), never in CI:
#   OUT=DIR bash bench/h200.sh
# 1. tests/gpu/real_gpu_check.sh: two torch holders (one ignores SIGTERM) released through
#    ansible-playbook, check mode, real run, idempotent re-run;
# 2. bench/h200_release.py: gpu_release beside the driver's own release time (SIGKILL path, a holder
#    exiting on SIGTERM, eight holders, and a tensor-parallel-2 set where there are two GPUs).
# ansible-core comes from the venv, or from wheels in .whl/ (CPython 3.12 manylinux x86_64).
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
bash tests/gpu/real_gpu_check.sh 2>&1 | tee "$OUT/real_gpu_check.log"
if ! python3 -c 'import ansible' 2>/dev/null; then
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.cache/collections
python3 bench/h200_release.py --rounds "${ROUNDS:-3}" 2>&1 | tee "$OUT/h200_release.log"
# 3. bench/gpu_release_scoped.py: gpus [0] ends GPU 0's holder, GPU 1's keeps its memory (two GPUs or more).
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ]; then
  python3 bench/gpu_release_scoped.py 2>&1 | tee "$OUT/gpu_release_scoped.log"
fi
