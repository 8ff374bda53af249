#!/bin/bash
# Runs inside a lab gpu container (podman exec): a Python environment of its own at DEST with a copy of SRC's
# packages (the sglang release and the stand-in's .pth), so that a server run from it can be patched without
# changing the code of a server run from SRC. Made as lab/image/build.sh makes /opt/sglang/venv: a venv without pip
# (the image's Debian 12 has no ensurepip), its site-packages filled with the packages, copied here from SRC's
# instead of installed again (no wheel and no network inside a container). Kept when DEST exists.
#   own-venv.sh SRC DEST     e.g. /opt/sglang/venv /opt/sglang-b/venv (gpu1b in the colocated lab)
set -euo pipefail
src=$1 dest=$2
[ -x "$dest/bin/python" ] && exit 0
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
/usr/bin/python3 -m venv --without-pip "$dest"
cp -a "$(purelib "$src")/." "$(purelib "$dest")/"
