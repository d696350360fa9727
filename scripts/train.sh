#!/usr/bin/env bash
# Installs what is missing, builds, fetches the data and trains a config (the default: the
# nanoGPT-sized Shakespeare character model).
#   scripts/train.sh                                  # configs/shakespeare_char.json
#   scripts/train.sh configs/tiny.json --set train.max_steps=50
# Extra arguments go to `tfm train`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

config="${1:-configs/shakespeare_char.json}"
[ $# -gt 0 ] && shift
tfm_prepare
# Runs go to runs/<config name> unless --out is given. A run that already has a checkpoint is
# continued (tfm never overwrites a run); delete its directory to start over.
run_dir="runs/$(basename "$config" .json)"
args=()  # the extra arguments without --out DIR
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ] && [ $# -ge 2 ]; then run_dir="$2"; shift 2; else args+=("$1"); shift; fi
done
if [ -f "$run_dir/last.ckpt" ] || [ -f "$run_dir/best.ckpt" ]; then
  echo "tfm: $run_dir already holds a run: continuing it (rm -r $run_dir to start over)"
  "$TFM_BIN" train --resume "$run_dir" "${args[@]}"
else
  "$TFM_BIN" train --config "$config" --out "$run_dir" "${args[@]}"
fi
[ -f "$run_dir/loss.svg" ] && echo "tfm: loss curve in $run_dir/loss.svg (any browser opens it)"
