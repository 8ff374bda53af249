#!/bin/bash
# Runs inside a lab gpu container (podman exec): N simulated NVIDIA GPUs (default 1) and nvidia-smi.
#   setup-gpu-host.sh [N]
# The device files are character devices in the container's own /dev with /dev/null's numbers
# (1,3): openable without a driver, and of the kind gpu_release accepts under /dev (it refuses
# anything else there). Real processes hold them open. GPU K is /dev/nvidiaK, minor K, as the driver names
# them; the simulator tells one GPU's holders from another's by the path each process holds open
# (/proc/PID/fd), which is what the collection reads too. gpus.json and the driver's information files
# (/proc/driver/nvidia/gpus/<bus id>/information, which no container can write: here under
# /var/lib/nvidia-smi-sim/driver/nvidia/gpus) come from lab/simulators/gpu_config.py.
set -euo pipefail
gpus=${1:-1}
mkdir -p /dev/nvidia-caps /var/lib/nvidia-smi-sim/alloc
chardev() { [ -c "$1" ] || { rm -f "$1"; mknod -m 666 "$1" c 1 3; }; }
for name in nvidiactl nvidia-uvm nvidia-uvm-tools nvidia-caps/nvidia-cap1 nvidia-caps/nvidia-cap2; do
  chardev "/dev/$name"
done
for ((i = 0; i < gpus; i++)); do chardev "/dev/nvidia$i"; done
/usr/bin/python3 /opt/lab/simulators/gpu_config.py --state /var/lib/nvidia-smi-sim --gpus "$gpus"
/opt/lab/guest/model-folders.sh
printf '#!/bin/sh\n# nvidia-smi SIMULATOR (gpuops.sglang lab)\nexec /usr/bin/python3 /opt/lab/simulators/nvidia_smi.py "$@"\n' >/usr/local/bin/nvidia-smi
chmod 755 /usr/local/bin/nvidia-smi
