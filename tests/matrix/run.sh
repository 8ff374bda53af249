#!/bin/bash
# `make matrix-2.21` (and the end of `make matrix`): the unit and integration pytest suites on the second
# controller, ansible-core 2.21 on Python 3.13 (Debian 13 trixie), in a podman container; the host venv
# covers 2.19 on 3.11.
# `tests/matrix/run.sh --sanity` (`make matrix-sanity`): ansible-test sanity and antsibull-changelog lint there.
#
# Built once and reused: the lab's Debian 13 image (lab/image/build.sh trixie: the debootstrap that
# also makes the lab's trixie hosts, so CI pays for one) and the volume gpuops-matrix-venv-HASH (a
# venv made from requirements/matrix.txt, mounted at the checkout's .venv inside the container, so
# the README's `.venv/bin/...` lines work there as written; the host's own .venv is not touched).
# The image is only read; every container and volume made here is named gpuops-matrix-*: the lab's
# containers are never touched.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
export CONTAINERS_CONF=$repo/lab/containers.conf
hash=$(cat "$repo/requirements/matrix.txt" <(echo "$repo") | sha256sum | cut -c1-12)
volume=gpuops-matrix-venv-$hash
# ~/.ansible in the container (ansible-test's sanity venvs): kept, so a second matrix-sanity is warm.
home=gpuops-matrix-home-$hash
# The machine's pip trust store (PyPI may be reached through an inspecting proxy).
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
# ...also for the pip calls of ansible-test, which drops PIP_CERT from their environment: a pip.conf.
mkdir -p "$repo/.cache/matrix"
printf '[global]\ncert = /etc/gpuops-matrix/ca.crt\n' >"$repo/.cache/matrix/pip.conf"
started=$SECONDS

"$repo/lab/image/build.sh" trixie
image=$("$repo/lab/image/build.sh" --name trixie)

run() {
  # --init: a real PID 1 reaps the orphans the process tests make, and pytest has a parent.
  podman run --rm --init --name "gpuops-matrix-run-$$" --network host --privileged --pid private \
    -v "$repo:$repo" -v "$volume:$repo/.venv" -v "$home:/root/.ansible" -v "$ca:/etc/gpuops-matrix/ca.crt:ro" \
    -v "$repo/.cache/matrix/pip.conf:/etc/pip.conf:ro" \
    -e PIP_CERT=/etc/gpuops-matrix/ca.crt -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e HOME=/root \
    -w "$repo" "$image" "$@"
}

if ! podman volume exists "$volume" || ! run test -x "$repo/.venv/bin/ansible-playbook"; then
  step=$SECONDS
  podman volume exists "$volume" || podman volume create "$volume" >/dev/null
  echo "matrix: venv with requirements/matrix.txt"
  run bash -c 'python3 -m venv .venv && .venv/bin/pip install -q -r requirements/matrix.txt'
  echo "matrix: venv ready ($((SECONDS - step)) s)"
fi

run .venv/bin/python --version
run .venv/bin/ansible --version | head -1
step=$SECONDS
if [ "${1:-}" = --sanity ]; then
  # `make matrix-sanity`: ansible-test sanity (its own copy of the tree under .cache/ansible-test-2.21, so a
  # host `make sanity` is not disturbed) and the changelog fragments, on this controller.
  run env ANSIBLE_TEST_BIN="$repo/.venv/bin" ANSIBLE_TEST_WORK="$repo/.cache/ansible-test-2.21" \
    tests/sanity/run-ansible-test.sh
  run .venv/bin/antsibull-changelog lint
  echo "matrix: ansible-core 2.21 / Python 3.13 sanity and changelog lint passed ($((SECONDS - step)) s; all $((SECONDS - started)) s)"
  exit 0
fi
# molecule is not in the 2.21 venv (it runs on the first controller, in `make molecule`): its docs block is
# checked there, not here.
run .venv/bin/pytest -q -p no:cacheprovider tests/unit tests/integration \
  --deselect tests/integration/test_doc_commands.py::test_the_molecule_steps_without_the_lab_work_as_written "$@"
echo "matrix: ansible-core 2.21 / Python 3.13 suites passed ($((SECONDS - step)) s; all $((SECONDS - started)) s)"
