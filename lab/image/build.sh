#!/bin/bash
# Builds a lab image once: Debian SUITE (debootstrap, from the mirror this machine's apt already
# uses), sshd, systemd, GNU patch, and a venv with the real sglang release the patch is for, installed
# with pip --no-deps. With --native, a second image on top of that one adds a venv with the native
# release (adaptive mode with batch-size tiers), which only the lab tests serve: `make demo` builds
# neither it nor the download of its 39 MB wheel. The lab's own code (simulators, stand-in server) is
# bind-mounted at run time from lab/, so editing it needs no rebuild.
#   lab/image/build.sh [--native] SUITE          build localhost/gpuops-lab:SUITE-N[-native] unless it exists
#   lab/image/build.sh --name [--native] SUITE   print that name only
# SUITE: bookworm (Debian 12, Python 3.11, Proxmox VE 8's base) or trixie (Debian 13, Python 3.13,
# Proxmox VE 9's base). The trixie image is also the second controller of `make matrix`
# (tests/matrix/run.sh): one debootstrap serves both, hence python3-venv, ca-certificates and git
# (ansible-test, make matrix-sanity) in it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export CONTAINERS_CONF=$repo/lab/containers.conf
packages=python3,procps,psmisc,openssh-server,patch,systemd,systemd-sysv,dbus,util-linux

name_only=false native=false
while [ $# -gt 1 ]; do
  case $1 in
    --name) name_only=true ;;
    --native) native=true ;;
    *) break ;;
  esac
  shift
done
suite=${1:-}
# The number after the suite changes whenever what goes into that image changes.
case $suite in
  bookworm) image=localhost/gpuops-lab:bookworm-3 ;;
  trixie) image=localhost/gpuops-lab:trixie-4 packages+=,python3-venv,ca-certificates,git ;;
  *) echo "usage: lab/image/build.sh [--name] [--native] bookworm|trixie" >&2; exit 2 ;;
esac
base=$image
if $native; then image=$base-native; fi
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

# The server's interpreters: venvs holding real sglang releases, no torch. The cached wheels are
# CPython 3.11's; their Python source, which is all the lab uses, is the same for 3.13.
#   /opt/sglang/venv          requirements/lab.txt (the release the lab's patch is for; the default)
#   /opt/sglang-native/venv   requirements/lab-native.txt (served unpatched, adaptive mode with tiers;
#                             the -native image only)
install_release() {
  local root=$1 venv=$2 requirements=$3 site
  chroot "$root" python3 -m venv --without-pip "$venv"
  site=$root$(chroot "$root" "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$repo/.venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-index \
    --find-links "$repo/.cache/wheels" --target "$site" --python-version 3.11 --only-binary=:all: \
    "$(grep '^sglang==' "$repo/$requirements")"
  # The lab's stand-in server package, mounted at /opt/lab at run time.
  echo /opt/lab/standin >"$site/gpuops_lab_standin.pth"
}

started=$SECONDS
if $native; then
  # One layer on the base image: its container's root filesystem, mounted here, gets the venv.
  "$0" "$suite"
  echo "building $image: $base and the native release"
  container=$(podman create --quiet "$base" /bin/true)
  trap 'podman rm -f "$container" >/dev/null 2>&1 || true' EXIT
  install_release "$(podman mount "$container")" /opt/sglang-native/venv requirements/lab-native.txt
  podman unmount "$container" >/dev/null
  podman commit --quiet "$container" "$image" >/dev/null
  echo "built $image ($((SECONDS - started)) s)"
  exit 0
fi

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

install_release "$rootfs" /opt/sglang/venv requirements/lab.txt

tar -C "$rootfs" -c . | podman import --quiet - "$image" >/dev/null
echo "built $image ($((SECONDS - started)) s)"
