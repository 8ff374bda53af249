#!/bin/bash
# Real-GPU check of gpu_release, outside CI: two torch processes hold GPU memory
# (one exits on SIGTERM, one ignores it), gpu_release runs through ansible-playbook
# with a local connection, and the results land in $OUT (or ./gpu-check-out).
# Needs: python3 with torch and a CUDA GPU; ansible-core importable (or wheels in .whl/).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-check-out}; mkdir -p "$OUT"; export OUT
if ! python3 -c 'import ansible' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
mkdir -p .cache/collections/ansible_collections/gpuops
ln -sfn "$PWD" .cache/collections/ansible_collections/gpuops/sglang
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/.cache/collections
query() { nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits; }

echo "== idle:"; query
python3 tests/gpu/torch_holder.py 10 exit /tmp/ready-a & A=$!
python3 tests/gpu/torch_holder.py 20 ignore /tmp/ready-b & B=$!
while [ ! -e /tmp/ready-a ] || [ ! -e /tmp/ready-b ]; do sleep 0.1; done
echo "== held (holder A pid $A exits on TERM, holder B pid $B ignores TERM):"; query
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits
for pid in $A $B; do echo "pid $pid holds: $(ls -l /proc/$pid/fd | grep -o '/dev/nvidia[^ ]*' | sort -u | tr '\n' ' ')"; done
echo "== fuser -v /dev/nvidia* (for comparison):"; fuser -v /dev/nvidia* 2>&1 || true
echo "== ansible-playbook tests/gpu/release.yml"
time ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$(command -v python3)" tests/gpu/release.yml
echo "== after:"; query
for pid in $A $B; do if kill -0 $pid 2>/dev/null; then echo "pid $pid STILL ALIVE"; else echo "pid $pid gone"; fi; done
wait $A $B 2>/dev/null || true
python3 - "$OUT/gpu_release_results.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
for name, res in results.items():
    print('%-8s changed=%s failed=%s elapsed=%s' % (name, res.get('changed'), res.get('failed', False), res.get('elapsed')))
    print('         killed=%s' % [(k['pid'], k['signal'], k['cmdline'][-40:]) for k in res.get('killed', [])])
    print('         excluded=%s' % res.get('excluded'))
    print('         before=%s after=%s' % ([g['memory_used_mib'] for g in res.get('gpus_before', [])],
                                           [g['memory_used_mib'] for g in res.get('gpus', [])]))
PY
