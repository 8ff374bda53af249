#!/bin/bash
# Builds the lab image once: Debian bookworm (debootstrap, from the mirror this machine's apt
# already uses), sshd, systemd, GNU patch, and a venv with a real sglang release installed
# with pip --no-deps. The lab's own code (simulators, stand-in server) is bind-mounted at
# run time from lab/, so editing it needs no rebuild.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
image=${LAB_IMAGE:-localhost/gpuops-lab:bookworm-1}
work=$repo/.cache/lab/image
export CONTAINERS_CONF=$repo/lab/containers.conf

if podman image exists "$image"; then
  echo "lab image $image is already built"; exit 0
fi

mirror() {
  # The first Debian URI of this machine's apt sources (deb822 or one-line format).
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  if [ -z "$uri" ]; then
    uri=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  fi
  [ -n "$uri" ] || { echo "no Debian mirror found in /etc/apt sources" >&2; exit 1; }
  echo "$uri"
}

rm -rf "$work" && mkdir -p "$work"
rootfs=$work/rootfs
echo "debootstrap bookworm into $rootfs (mirror from this machine's apt sources)"
debootstrap --variant=minbase \
  --include=python3,procps,psmisc,openssh-server,patch,systemd,systemd-sysv,dbus,util-linux \
  bookworm "$rootfs" "$(mirror)" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }

# sshd for the lab: keys only, listen address and port come from the container's command line.
mkdir -p "$rootfs/root/.ssh" "$rootfs/run/sshd"
chmod 700 "$rootfs/root/.ssh"
cat >"$rootfs/etc/ssh/sshd_config.d/lab.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
AuthorizedKeysFile /opt/lab-state/authorized_keys
CONF
rm -f "$rootfs"/etc/ssh/ssh_host_*
chroot "$rootfs" ssh-keygen -A >/dev/null
# The containers share the host's network: sshd must not also try port 22 on every address.
chroot "$rootfs" systemctl disable ssh.service >/dev/null 2>&1 || true
chroot "$rootfs" systemctl mask getty@tty1.service console-getty.service systemd-logind.service >/dev/null 2>&1 || true

# The server's interpreter: a venv holding a real sglang release, no torch.
chroot "$rootfs" python3 -m venv --without-pip /opt/sglang/venv
site=$rootfs/opt/sglang/venv/lib/python3.11/site-packages
"$repo/.venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-index \
  --find-links "$repo/.cache/wheels" --target "$site" \
  "$(grep '^sglang==' "$repo/requirements-lab.txt")"
# The lab's stand-in server package, mounted at /opt/lab at run time.
echo /opt/lab/standin >"$site/gpuops_lab_standin.pth"

tar -C "$rootfs" -c . | podman import --quiet - "$image" >/dev/null
rm -rf "$rootfs"
echo "built $image"
