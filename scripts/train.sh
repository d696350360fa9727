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
tfm_install
tfm_build "$TFM_ROOT/build/release" -DCMAKE_BUILD_TYPE=Release -DTFM_BUILD_TESTS=OFF
scripts/get_data.sh
# Runs go to runs/<config name> unless --out is given.
out_args=()
[[ " $* " == *" --out "* ]] || out_args=(--out "runs/$(basename "$config" .json)")
"$TFM_ROOT/build/release/tfm" train --config "$config" "${out_args[@]}" "$@"
run_dir="runs/$(basename "$config" .json)"
if [ -f scripts/plot.py ] && [ -d "$run_dir" ] && /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 scripts/plot.py "$run_dir" && echo "tfm: loss curve in $run_dir/loss.png"
fi
