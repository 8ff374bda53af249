# Two commands on a fresh Debian machine, as root:
#   make demo   full redeploy against the embedded lab, visible and verified; installs and builds only what
#               it needs (demo-setup: no browser, no test tooling, no native sglang release)
#   make demo-multinode   the same for the lab's two-node SGLang server (mn1 rank 0, mn2 rank 1), one group
#   make test   every test on the first controller (unit, integration, lab, dashboard with a headless browser, sanity,
#               ansible-test integration, the Galaxy importer and antsibull-docs, lint, molecule), its stages side
#               by side, each lab stage on its own lab (tests/run_stages.py); `make matrix` adds the 2.21
#               controller (CI's time: README)
#   make test-quick   the unit suite and the integration tests under 2 s each (no lab, no container): the inner loop
#   make fleet   eight lab hosts behind the SGLang gateway (smg), a rolling redeploy under load (one JSON line)
#   make dashboard   the reference ops page against the lab, on 127.0.0.1:$DASHBOARD_PORT (default 8765)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
CACHE := $(CURDIR)/.cache
COLLECTION_LINK := $(CACHE)/collections/ansible_collections/gpuops/sglang
# The Galaxy importer's own venv (requirements/galaxy-importer.txt says why it is not .venv).
IMPORTER_VENV := $(CACHE)/galaxy-importer
# What `make demo` needs; `make setup` (make test) adds the browser of the dashboard's test and the Java (17 or later)
# runtime ansible-rulebook's rules engine needs (tests/integration/test_eda_undo_rulebook.py).
DEMO_APT_PACKAGES := podman runc debootstrap uidmap catatonit openssh-client patch psmisc procps util-linux python3-venv
DEMO_TOOLS := podman runc debootstrap catatonit ssh ssh-keygen patch nsenter unshare
APT_PACKAGES := $(DEMO_APT_PACKAGES) chromium default-jre-headless
TOOLS := $(DEMO_TOOLS) chromium java
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(BIN):$(PATH)
# ansible-lint and molecule (ansible-compat) keep their caches, and a copy of this collection,
# under $VIRTUAL_ENV/.ansible; that copy is removed before each run so it is never stale.
export VIRTUAL_ENV := $(CURDIR)/$(VENV)
STALE_COPY := $(CURDIR)/$(VENV)/.ansible/collections/ansible_collections/gpuops

.PHONY: fleet setup demo-setup demo-multinode host-packages demo-host-packages test test-quick test-unit test-integration test-lab test-dashboard sanity integration-targets galaxy-check lint molecule demo dashboard lab-up lab-down gpu-check build clean bench bench-outage bench-warm bench-serving bench-bake bench-tune bench-gpu matrix matrix-2.21 matrix-sanity

setup: host-packages demo-setup $(VENV)/.installed $(VENV)/.dashboard-installed $(CACHE)/wheels/.done

# What `make demo` needs and nothing more (the four-minute first run, README): no browser, no test
# tooling, no dashboard, no native sglang release (the lab runs its base images: lab/image/build.sh).
demo-setup: demo-host-packages $(VENV)/.demo-installed $(COLLECTION_LINK) $(CACHE)/wheels/.demo-done

# apt packages, installed once when any is missing (Debian's python3 needs python3-venv for venvs).
define install_host_packages
	@missing=""; for tool in $(1); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	$(PYTHON) -c 'import ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then echo "installing host packages (missing:$$missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; fi
endef

host-packages:
	$(call install_host_packages,$(TOOLS),$(APT_PACKAGES))

demo-host-packages:
	$(call install_host_packages,$(DEMO_TOOLS),$(DEMO_APT_PACKAGES))

$(VENV)/.demo-installed: requirements/demo.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/demo.txt
	touch $@

$(VENV)/.installed: requirements/test.txt requirements/demo.txt $(VENV)/.demo-installed
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/test.txt
	touch $@

# The ops page and its browser test (Playwright drives Debian's chromium: no browser download).
$(VENV)/.dashboard-installed: requirements/dashboard.txt $(VENV)/.installed
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/dashboard.txt
	touch $@

$(IMPORTER_VENV)/.installed: requirements/galaxy-importer.txt requirements/demo.txt
	$(PYTHON) -m venv $(IMPORTER_VENV)
	$(IMPORTER_VENV)/bin/pip install -q --disable-pip-version-check -r requirements/galaxy-importer.txt
	touch $@

# Playbooks and ansible-doc resolve gpuops.sglang.* from this checkout through this link.
$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

# The real sglang wheels the tests and the lab install (the patched release and the native one), fetched once;
# the demo needs the patched one only.
$(CACHE)/wheels/.demo-done: requirements/lab.txt $(VENV)/.demo-installed
	$(BIN)/pip download -q --disable-pip-version-check --no-deps -r requirements/lab.txt -d $(CACHE)/wheels
	touch $@

$(CACHE)/wheels/.done: requirements/lab.txt requirements/lab-native.txt $(CACHE)/wheels/.demo-done
	$(BIN)/pip download -q --disable-pip-version-check --no-deps -r requirements/lab-native.txt -d $(CACHE)/wheels
	touch $@

test-unit: setup
	$(BIN)/pytest -q -n 2 tests/unit

test-integration: setup
	$(BIN)/pytest -q -n 4 tests/integration

# The inner loop: what needs no lab and takes under 2 s a test (pytest-xdist: most of these tests wait on a
# process or a bound, not the CPU). The integration tests marked slow (a real bound waited out, a release
# installed, servers started) run in `make test` and `make test-integration`.
test-quick: setup
	$(BIN)/pytest -q -n 4 -m 'not slow' tests/unit tests/integration

test-lab: setup
	$(BIN)/pytest -q tests/lab

# The dashboard's API and page (headless chromium) against the lab; leaves the lab serving.
test-dashboard: setup
	$(BIN)/pytest -q tests/dashboard

sanity: setup
	tests/sanity/run-ansible-test.sh

# ansible-test's own integration targets (tests/integration/targets), as a downstream CI runs them.
integration-targets: setup
	tests/ansible-test.sh integration --venv

# What the ecosystem's own tools say: the Galaxy importer (with its ansible-lint run) imports the built tarball
# with no warning or error, and antsibull-docs lints every plugin's and the role's documentation markup.
# The importer's venv is made here, not in setup: in make test this stage makes it beside the others.
galaxy-check: setup $(IMPORTER_VENV)/.installed
	tests/galaxy-check.sh

lint: setup
	rm -rf $(STALE_COPY)
	$(BIN)/ansible-lint --offline --profile production

molecule: setup
	rm -rf $(STALE_COPY)
	$(BIN)/molecule test --all 2>&1 | tee $(CACHE)/molecule.log
	@# molecule only warns when its verifier finds no test: that must not pass
	@grep -qE '[0-9]+ passed' $(CACHE)/molecule.log || { echo "molecule ran no testinfra test" >&2; exit 1; }

# Every stage (tests/run_stages.py --list): pytest's unit and integration suites, the lab's files on labs 1 to 4, the
# dashboard on lab 5, sanity, ansible-test integration, galaxy-check, lint, molecule on the default lab; as many at
# once as their weights fit TEST_CAPACITY (5).
test: setup
	$(BIN)/python tests/run_stages.py

demo: demo-setup
	LAB_NATIVE_RELEASE=0 lab/lab up
	$(BIN)/ansible-playbook -i inventory/lab playbooks/redeploy.yml
	lab/lab summary

# The lab's two-node SGLang server (mn1 rank 0, mn2 rank 1: inventory/lab-multinode) redeployed as one group.
demo-multinode: demo-setup
	LAB_NATIVE_RELEASE=0 lab/lab up --multinode
	$(BIN)/ansible-playbook -i inventory/lab-multinode playbooks/redeploy.yml
	lab/lab summary

# The reference ops page against the lab: http://127.0.0.1:$${DASHBOARD_PORT:-8765}/, token from
# DASHBOARD_TOKEN, or generated into .cache/dashboard/token (0600; never printed). Patch files a redeploy may
# name: files/ (DASHBOARD_PATCH_DIRS, colon-separated, for others).
dashboard: setup
	lab/lab up
	$(BIN)/python -m gpuops_dashboard --inventory inventory/lab

lab-up: setup
	lab/lab up

lab-down:
	lab/lab down

# The whole version matrix: the first controller (ansible-core 2.19 on the host's Python 3.11) runs the
# unit and integration suites and the lab's redeploys on both target images (Debian 12 and 13), then the
# second controller (matrix-2.21) runs the unit and integration suites.
matrix: setup
	$(BIN)/pytest tests/unit tests/integration tests/lab
	$(MAKE) --no-print-directory matrix-2.21

# The second controller alone: ansible-core 2.21 on Python 3.13 (Debian 13) in a podman container
# (tests/matrix/run.sh).
matrix-2.21: setup
	tests/matrix/run.sh

# ansible-test sanity and antsibull-changelog lint on that controller too (tests/matrix/run.sh --sanity).
# Not in `make test`: its first run builds ansible-test's sanity venvs on Python 3.13 (3 min 11 s measured;
# 45 to 75 s once they exist in the gpuops-matrix-home-* volume), more than CI's budget allows for it.
matrix-sanity: setup
	tests/matrix/run.sh --sanity

build: setup
	$(BIN)/ansible-galaxy collection build --force --output-path $(CACHE)/build

clean: lab-down
	rm -rf $(VENV) $(CACHE) tests/output

# On a host with an NVIDIA GPU and torch (never in CI): hold memory, release it through Ansible.
gpu-check: setup
	tests/gpu/real_gpu_check.sh

bench: setup
	$(BIN)/python bench/bench_modules.py

# Outage from outside (20 ms /health probes) on the lab: plain restart, manual script, redeploy, no-op.
bench-outage: setup $(VENV)/.bench-installed
	lab/lab up
	$(BIN)/python bench/outage.py --rounds $${ROUNDS:-5}

# The model load inside the outage (issue 45): a forced redeploy of a host whose model files were dropped from the
# page cache, with the prefetch and without, against a plain restart of a warm server; 2048 MiB of weights per
# server (a kept lab remakes its weight files), bench/results/warm-*.json.
bench-warm: setup $(VENV)/.bench-installed
	LAB_WEIGHTS_MIB=$${LAB_WEIGHTS_MIB:-2048} lab/lab up
	LAB_WEIGHTS_MIB=$${LAB_WEIGHTS_MIB:-2048} $(BIN)/python bench/warm.py --rounds $${ROUNDS:-5}

# Output tok/s and p95 inter-token latency against concurrency (1 to 64), the stand-in without speculation,
# with EAGLE-3 and with EAGLE-3 stopped from the threshold, plus the noise of an unchanged server: stand-ins
# started directly on loopback (no lab lock), docs/measurements/DATE-serving.json and docs/benchmarks-serving.png.
bench-serving: setup $(VENV)/.bench-installed
	$(BIN)/python bench/serving.py --noise-runs $${ROUNDS:-5}

# The canary bake's analysis on two stand-ins on loopback: its noise on an unchanged canary and the smallest
# slowdown it catches (docs/canary-bake.md), docs/measurements/DATE-bake.json.
bench-bake: setup $(VENV)/.bench-installed
	$(BIN)/python bench/bake.py --repeats $${ROUNDS:-5}

# The speculation tuner on the lab's gpu2 for three draft acceptance rates, timed (docs/speculation-tuning.md),
# docs/measurements/DATE-tune.json.
bench-tune: setup
	lab/lab up
	ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(BIN)/ansible-playbook -i inventory/lab playbooks/redeploy.yml
	$(BIN)/python bench/tune.py

$(VENV)/.bench-installed: requirements/bench.txt $(VENV)/.installed
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/bench.txt
	touch $@

# On a host with NVIDIA GPUs and torch (never in CI): the real-GPU check plus gpu_release beside the
# driver's own release time.
bench-gpu: setup
	bench/h200.sh

# Eight lab hosts behind the lab's SGLang gateway (smg); a rolling redeploy (batches of 2, at most 2 servers out)
# under a steady load through the router. Last line: {hosts, requests_total, requests_failed, min_healthy, wall_s, ...}.
# BAKE=SECONDS: gpu1 a canary that bakes that long under the load first (docs/canary-bake.md).
fleet: setup
	$(BIN)/python bench/fleet.py --hosts $${FLEET_HOSTS:-8} --bake $${BAKE:-0}
