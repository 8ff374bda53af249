#!/bin/bash
# ansible-test sanity on the modules and module_utils. ansible-test must run from a
# path ending in ansible_collections/NAMESPACE/NAME, so the tracked files are copied
# into one under .cache first.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$repo/.venv/bin
dest=$repo/.cache/sanity/ansible_collections/gpuops/sglang
mkdir -p ~/.ansible/test/cache
cp "$repo/tests/sanity/get_pip_offline.py" ~/.ansible/test/cache/get_pip_24_2.py
rm -rf "$dest" && mkdir -p "$dest"
(cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$dest")
cd "$dest"
# The checkout around .cache would make ansible-test list its files, not these.
git init -q .
"$bin/ansible-test" sanity --venv --python 3.11 --color no "$@" plugins/
