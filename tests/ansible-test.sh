#!/bin/bash
# ansible-test COMMAND ARGS... on a copy of the tracked files. ansible-test must run from a path
# ending in ansible_collections/NAMESPACE/NAME, so the files are copied into one under
# .cache/ansible-test/COMMAND first. Its pip bootstrap is the offline stand-in (see get_pip_offline.py).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${ANSIBLE_TEST_BIN:-$repo/.venv/bin}
command=$1
shift
# ANSIBLE_TEST_WORK: another folder for the copy (make matrix-sanity's, beside a host run's).
dest=${ANSIBLE_TEST_WORK:-$repo/.cache/ansible-test}/$command/ansible_collections/gpuops/sglang
mkdir -p ~/.ansible/test/cache
# The name carries the pip version the ansible-test release bootstraps: 24.2 for 2.19, 25.2 for 2.21.
for name in get_pip_24_2.py get_pip_25_2.py; do
  cp "$repo/tests/sanity/get_pip_offline.py" ~/.ansible/test/cache/$name
done
rm -rf "$dest" && mkdir -p "$dest"
# -c lists a tracked file deleted or moved away and not yet committed: only what the tree holds is copied.
(cd "$repo" && git ls-files -co --exclude-standard -z \
  | xargs -0 sh -c 'for f; do if [ -e "$f" ] || [ -L "$f" ]; then printf "%s\0" "$f"; fi; done' sh \
  | xargs -0 cp --parents -t "$dest")
cd "$dest"
# The checkout around .cache would make ansible-test list its files, not these.
git init -q .
python=$("$bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# Our options last: with `--venv` just before the target (`... --venv plugins/`), ansible-test 2.19
# sanity tested the whole tree instead of the target.
exec "$bin/ansible-test" "$command" "$@" --python "$python" --color no
