#!/usr/bin/env bash
# Installs what is missing, builds, fetches the data and trains a config (the default: the
# nanoGPT-sized Shakespeare character model).
#   scripts/train.sh                                  # configs/shakespeare_char.json
#   scripts/train.sh configs/tiny.json --set train.max_steps=50
#   scripts/train.sh --set train.max_steps=500        # the default config, changed
#   scripts/train.sh my.json --out my_run             # paths are taken from where you are
# Extra arguments go to `tfm train`. The run goes to runs/<config name> in the repository unless --out
# says where; a run that already has a checkpoint is continued (tfm never overwrites a run): delete its
# directory to start over.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

case "${1:-}" in
  -h | --help) tfm_usage; exit 0 ;;
esac
config="configs/shakespeare_char.json"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a first argument that is no option names the config
  config="$(tfm_user_config "$1")"
  shift
fi
tfm_require_config "$config"
run_dir="runs/$(basename "$config" .json)"
args=()  # the extra arguments without --out DIR
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ]; then
    tfm_value "$@"
    run_dir="$(tfm_user_path "$2")"
    shift 2
  else
    args+=("$1")
    shift
  fi
done
tfm_prepare
if [ -f "$run_dir/last.ckpt" ] || [ -f "$run_dir/best.ckpt" ]; then
  echo "tfm: $run_dir already holds a run: continuing it (rm -r $run_dir to start over)"
  "$TFM_BIN" train --resume "$run_dir" "${args[@]}"
else
  "$TFM_BIN" train --config "$config" --out "$run_dir" "${args[@]}"
fi
[ -f "$run_dir/loss.svg" ] && echo "tfm: loss curve in $run_dir/loss.svg (any browser opens it)"
