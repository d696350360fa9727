#!/usr/bin/env bash
# Cross-checks a run's export against the PyTorch reference: tfm export -> tfm eval --dump-logits ->
# torch_lm.py --load-safetensors --check-logits, and prints the largest logit difference (must be <= 1e-4).
# Usage: scripts/dev/check_export.sh RUN_DIR [TFM_BINARY]   (run from anywhere)
# TFM_BINARY defaults to $TFM_BINARY, else the first tfm built in build/dev, build/release, build/test, build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
run=${1:?usage: scripts/dev/check_export.sh RUN_DIR [TFM_BINARY]}
tfm_find_binary "${2:-}"
tfm=$TFM_BIN
root=$TFM_ROOT
run=$(cd "$run" && pwd)
work=$(mktemp -d /tmp/tfm_check_export.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$root"  # torch_lm.py reads the config's data.path relative to the working directory
"$tfm" export --run "$run" --out "$work/model.safetensors"
"$tfm" eval --run "$run" --dump-logits "$work/logits.json" --batches 2
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  echo "check_export.sh: /usr/bin/python3 has no torch/numpy; the export is written but not cross-checked" >&2
  exit 2
fi
out=$(/usr/bin/python3 "$root/scripts/torch_lm.py" --config "$run/config.json" \
  --load-safetensors "$work/model.safetensors" --check-logits "$work/logits.json") || { echo "$out"; exit 1; }
echo "$out"
diff=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["max_abs_logit_diff"])' "$out")
if /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-4 else 1)' "$diff"; then
  echo "max |logit difference| vs PyTorch: $diff (<= 1e-4: OK)"
else
  echo "max |logit difference| vs PyTorch: $diff (> 1e-4: FAIL)"; exit 1
fi
