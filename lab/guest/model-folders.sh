#!/bin/bash
# Runs inside a lab gpu container (podman exec), at its start and on every `lab/lab up` that keeps it (a lab
# started before these folders existed gets them): the model folders inventory/lab names, which the preflight
# checks, as the server's user, before anything stops. Each holds a config.json and weight files of random bytes
# (incompressible), which the stand-in reads before it serves, as SGLang loads before it binds its port:
# the target model LAB_WEIGHTS_MIB MiB (default 32, so the suite stays fast; lab/lab up passes it) in
# model-0000K-of-0000N.safetensors shards of at most 512 MiB, the EAGLE-3 draft a sixteenth of it in one
# pytorch_model.bin (as the published draft ships), at least 1 MiB. 0 makes folders without weights. The files
# are made once and remade only when LAB_WEIGHTS_MIB changes (their names and sizes tell), so a kept container
# keeps its files and their page-cache state.
set -euo pipefail
mib=${LAB_WEIGHTS_MIB:-32}
if ! [[ $mib =~ ^[0-9]+$ ]]; then
  echo "LAB_WEIGHTS_MIB must be a whole number of MiB (got '$mib')" >&2; exit 2
fi
mib=$((10#$mib))
shard_mib=512

# write_file PATH MIB: PATH of MIB MiB of random bytes, unless it already has that size. Written beside it under
# a name the stand-in does not load, then renamed: an interrupted run leaves no short weight file.
write_file() {
  local path=$1 size=$(($2 * 1048576)) partial
  if [ -f "$path" ] && [ "$(stat -c %s "$path")" = "$size" ]; then return 0; fi
  partial="$(dirname "$path")/.$(basename "$path").partial"
  head -c "$size" /dev/urandom >"$partial"
  chmod 644 "$partial"
  mv -f "$partial" "$path"
}

# keep_only FOLDER PATTERN NAME...: removes the files of FOLDER matching PATTERN that are not among the NAMEs
# (another LAB_WEIGHTS_MIB's shards), and any partial file an interrupted run left.
keep_only() {
  local folder=$1 pattern=$2 path wanted
  shift 2
  for path in "$folder"/$pattern "$folder"/.*.partial; do
    [ -e "$path" ] || continue
    wanted=0
    for name in "$@"; do [ "$(basename "$path")" = "$name" ] && wanted=1; done
    [ $wanted = 1 ] || rm -f "$path"
  done
}

for model in Llama-3.1-8B-Instruct EAGLE3-LLaMA3.1-Instruct-8B; do
  mkdir -p "/models/$model"
  [ -e "/models/$model/config.json" ] || echo '{"lab": "stand-in model folder: random weight files (LAB_WEIGHTS_MIB)"}' >"/models/$model/config.json"
done

target=/models/Llama-3.1-8B-Instruct shards=() sizes=()
if [ "$mib" -gt 0 ]; then
  count=$(((mib + shard_mib - 1) / shard_mib))
  for ((k = 1; k <= count; k++)); do
    shards+=("$(printf 'model-%05d-of-%05d.safetensors' "$k" "$count")")
    if [ "$k" -lt "$count" ]; then sizes+=("$shard_mib"); else sizes+=($((mib - shard_mib * (count - 1)))); fi
  done
fi
keep_only "$target" 'model-*-of-*.safetensors' "${shards[@]}"
for i in "${!shards[@]}"; do write_file "$target/${shards[$i]}" "${sizes[$i]}"; done

draft=/models/EAGLE3-LLaMA3.1-Instruct-8B
if [ "$mib" -gt 0 ]; then
  keep_only "$draft" pytorch_model.bin pytorch_model.bin
  write_file "$draft/pytorch_model.bin" $(((mib + 15) / 16))
else
  keep_only "$draft" pytorch_model.bin
fi
