#!/bin/bash
# Runs inside a lab gpu container (podman exec): simulated NVIDIA devices and nvidia-smi.
# The device files are character devices in the container's own /dev with /dev/null's numbers
# (1,3): openable without a driver, and of the kind gpu_release accepts under /dev (it refuses
# anything else there). Real processes hold them open.
set -euo pipefail
gpus=${1:-1}
mkdir -p /dev/nvidia-caps /var/lib/nvidia-smi-sim/alloc
chardev() { [ -c "$1" ] || { rm -f "$1"; mknod -m 666 "$1" c 1 3; }; }
for name in nvidiactl nvidia-uvm nvidia-uvm-tools nvidia-caps/nvidia-cap1 nvidia-caps/nvidia-cap2; do
  chardev "/dev/$name"
done
entries=""
for ((i = 0; i < gpus; i++)); do
  chardev "/dev/nvidia$i"
  entries+="${entries:+, }{\"index\": $i, \"uuid\": \"GPU-lab0000-0000-0000-0000-00000000000$i\", \"total_mib\": 143771, \"device\": \"/dev/nvidia$i\", \"leak_mib\": 0}"
done
echo "{\"release_delay\": 0.15, \"gpus\": [$entries]}" >/var/lib/nvidia-smi-sim/gpus.json
/opt/lab/guest/model-folders.sh
printf '#!/bin/sh\n# nvidia-smi SIMULATOR (gpuops.sglang lab)\nexec /usr/bin/python3 /opt/lab/simulators/nvidia_smi.py "$@"\n' >/usr/local/bin/nvidia-smi
chmod 755 /usr/local/bin/nvidia-smi
