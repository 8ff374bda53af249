#!/bin/bash
# make galaxy-check: what the ecosystem's own tools say of this collection.
# 1. The Galaxy importer imports the tarball `ansible-galaxy collection build` makes: the metadata, every
#    plugin's documentation through ansible-doc, the role, and its own ansible-lint run (production profile)
#    on the extracted tarball. Any WARNING or ERROR line fails the check: the importer itself only fails on
#    errors, and logs what ansible-lint finds as warnings.
# 2. antsibull-docs checks every plugin's and the role's documentation markup as the Ansible documentation
#    site builds it: O(), RV(), M() references, also those to ansible.builtin.
# The importer runs as Galaxy runs it, less the 180 s bound on its ansible-lint call (tests/galaxy_import.py
# says why). Offline: no ansible-test container (RUN_ANSIBLE_TEST), ansible-lint --offline. The importer extracts
# and keeps its Ansible temp files in this run's folder under .cache, removed at the end.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
importer=${IMPORTER_VENV:-$repo/.cache/galaxy-importer}
mkdir -p "$repo/.cache"
work=$(mktemp -d "$repo/.cache/galaxy-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$repo/.venv/bin/ansible-galaxy" collection build --output-path "$work" "$repo" >/dev/null
cat >"$work/galaxy-importer.cfg" <<CFG
[galaxy-importer]
RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = True
OFFLINE_ANSIBLE_LINT = True
RUN_ANSIBLE_DOC = True
CHECK_CHANGELOG = True
TMP_ROOT_DIR = $work
ANSIBLE_LOCAL_TMP = $work/ansible-tmp
CFG

# As Galaxy runs it: the importer's own ansible-doc and ansible-lint, none of this checkout's settings
# (ansible.cfg names the checkout's collection path and callback), its cwd outside the checkout.
status=0
(cd "$work" && env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH GALAXY_IMPORTER_CONFIG="$work/galaxy-importer.cfg" \
   VIRTUAL_ENV="$importer" PATH="$importer/bin:$PATH" \
   "$importer/bin/python" "$repo/tests/galaxy_import.py" gpuops-sglang-*.tar.gz) >"$work/import.log" 2>&1 || status=$?
cat "$work/import.log"
if [ "$status" -ne 0 ] || grep -qE '^(WARNING|ERROR)' "$work/import.log"; then
  echo "galaxy-check: the Galaxy importer did not import the tarball cleanly (exit $status)" >&2
  exit 1
fi

echo "antsibull-docs lint-collection-docs --plugin-docs"
PATH="$repo/.venv/bin:$PATH" "$repo/.venv/bin/antsibull-docs" lint-collection-docs --plugin-docs \
  --validate-collection-refs dependent "$repo"
echo "galaxy-check: imported cleanly, documentation markup clean"
