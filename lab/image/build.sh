#!/bin/bash
# Builds a lab image once: Debian SUITE (debootstrap, from the mirror this machine's apt already
# uses), sshd, systemd, GNU patch, and a venv with a real sglang release installed with pip
# --no-deps (two: the release the patch is for, and a native one whose adaptive mode takes batch-size
# tiers). The lab's own code (simulators, stand-in server) is bind-mounted at run time from
# lab/, so editing it needs no rebuild.
#   lab/image/build.sh SUITE          build localhost/gpuops-lab:SUITE-N unless it exists
#   lab/image/build.sh --name SUITE   print that name only
# SUITE: bookworm (Debian 12, Python 3.11, Proxmox VE 8's base) or trixie (Debian 13, Python 3.13,
# Proxmox VE 9's base). The trixie image is also the second controller of `make matrix`
# (tests/matrix/run.sh): one debootstrap serves both, hence python3-venv, ca-certificates and git
# (ansible-test, make matrix-sanity) in it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export CONTAINERS_CONF=$repo/lab/containers.conf
packages=python3,procps,psmisc,openssh-server,patch,systemd,systemd-sysv,dbus,util-linux

name_only=false
if [ "${1:-}" = --name ]; then name_only=true; shift; fi
suite=${1:-}
# The number after the suite changes whenever what goes into that image changes.
case $suite in
  bookworm) image=localhost/gpuops-lab:bookworm-2 ;;
  trixie) image=localhost/gpuops-lab:trixie-3 packages+=,python3-venv,ca-certificates,git ;;
  *) echo "usage: lab/image/build.sh [--name] bookworm|trixie" >&2; exit 2 ;;
esac
if $name_only; then echo "$image"; exit 0; fi
if podman image exists "$image"; then exit 0; fi

mirror() {
  # The first Debian URI of this machine's apt sources (deb822 or one-line format).
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  if [ -z "$uri" ]; then
    uri=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | grep -v security | head -1 \
          | sed -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1}')
  fi
  [ -n "$uri" ] || { echo "no Debian mirror found in /etc/apt sources" >&2; exit 1; }
  echo "$uri"
}

started=$SECONDS
mkdir -p "$repo/.cache/lab"
# Its own folder: the lab may build both suites at once, and `make matrix` the trixie one.
work=$(mktemp -d "$repo/.cache/lab/image-$suite.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
echo "building $image: debootstrap $suite (mirror from this machine's apt sources)"
debootstrap --variant=minbase --include="$packages" \
  "$suite" "$rootfs" "$(mirror)" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }

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

# The server's interpreters: venvs holding real sglang releases, no torch. The cached wheels are
# CPython 3.11's; their Python source, which is all the lab uses, is the same for 3.13.
#   /opt/sglang/venv          requirements-lab.txt (the release the lab's patch is for; the default)
#   /opt/sglang-native/venv   requirements-lab-native.txt (served unpatched, adaptive mode with tiers)
install_release() {
  local venv=$1 requirements=$2 site
  chroot "$rootfs" python3 -m venv --without-pip "$venv"
  site=$rootfs$(chroot "$rootfs" "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$repo/.venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-index \
    --find-links "$repo/.cache/wheels" --target "$site" --python-version 3.11 --only-binary=:all: \
    "$(grep '^sglang==' "$repo/$requirements")"
  # The lab's stand-in server package, mounted at /opt/lab at run time.
  echo /opt/lab/standin >"$site/gpuops_lab_standin.pth"
}
install_release /opt/sglang/venv requirements-lab.txt
install_release /opt/sglang-native/venv requirements-lab-native.txt

tar -C "$rootfs" -c . | podman import --quiet - "$image" >/dev/null
echo "built $image ($((SECONDS - started)) s)"
