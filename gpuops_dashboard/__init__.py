"""gpuops.sglang for ops dashboards: `redeploy` (the Python API over ansible-runner) and a reference web app."""
