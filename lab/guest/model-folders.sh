#!/bin/bash
# Runs inside a lab gpu container (podman exec), at its start and on every `lab/lab up` that keeps it (a lab
# started before these folders existed gets them): the model folders inventory/lab names, which the preflight
# checks, as the server's user, before anything stops. The stand-in loads no weights: a config.json is all
# they hold.
set -euo pipefail
for model in Llama-3.1-8B-Instruct EAGLE3-LLaMA3.1-Instruct-8B; do
  mkdir -p "/models/$model"
  [ -e "/models/$model/config.json" ] || echo '{"lab": "stand-in model folder: no weights"}' >"/models/$model/config.json"
done
