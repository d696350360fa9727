#!/usr/bin/env bash
# `tfm board` in a real browser: headless Chromium (Debian's chromium) driven by puppeteer-core opens the
# board on two tiny runs, finds both in the runs table, sees the loss chart drawn with their points, sees
# a third run that trains meanwhile show a new step within seconds, sees a fourth, resumed from an
# earlier checkpoint meanwhile, lose its dead steps' points and gain the new ones, asks for a sample and
# an attention map and gets them, and saves screenshots (the first to docs/board.png with
# TFM_BOARD_SCREENSHOT=1).
#   puppeteer-core (pinned) installs once into a cache outside the repository; chromium with apt-get.
# Usage: scripts/dev/check_board.sh [TFM_BINARY]
#        scripts/dev/check_board.sh --install-only   (step 1 alone: scripts/test.sh fetches while it builds)
# Environment: TFM_PUPPETEER   install directory (default ${XDG_CACHE_HOME:-~/.cache}/tfm/puppeteer)
#              TFM_BOARD_KEEP=DIR   keep the runs and screenshots in DIR
# Exit status: 0 every check passed, 1 a check failed, 2 a setup error, 77 skipped (node/npm or chromium
# missing and not installable, or npm cannot reach its registry and nothing is cached).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
root=$TFM_ROOT
install_only=0
[[ ${1:-} == --install-only ]] && install_only=1
skip() { echo "check_board.sh: SKIPPED: $*"; exit 77; }

# ---- 1. chromium and puppeteer-core ----
if ! command -v chromium >/dev/null; then
  if [[ $(id -u) == 0 ]] && timeout 600 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
    { [[ $(id -u) == 0 ]] && apt-get update -qq >/dev/null 2>&1 &&
      timeout 600 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; then
    echo "check_board.sh: installed chromium"
  fi
  command -v chromium >/dev/null || skip "chromium is not installed and apt-get could not install it; no browser was run"
fi
version=24.9.0
home=${TFM_PUPPETEER:-${XDG_CACHE_HOME:-$HOME/.cache}/tfm/puppeteer}
tfm_npm_check_package check_board.sh puppeteer-core "$version" "$home"
((install_only)) && exit 0
tfm_find_binary "${1:-}"
tfm=$TFM_BIN

# ---- 2. two tiny runs, a third training beside the board ----
if [[ -n ${TFM_BOARD_KEEP:-} ]]; then
  work=$TFM_BOARD_KEEP
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/tfm_check_board.XXXXXX")
fi
tfm_keep_gemm_peak_in "$work/cache"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${TFM_BOARD_KEEP:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
tiny=(--config configs/tiny.json --set train.log_interval=5 --set train.eval_interval=20 --set train.threads=1)
"$tfm" train "${tiny[@]}" --set train.max_steps=100 --out "$work/runs/small" > "$work/small.log" 2>&1
# Another learning rate as well, so that its curves differ from the first run's and both show.
"$tfm" train "${tiny[@]}" --set train.max_steps=100 --set model.n_heads=2 --set train.optimizer.lr=1e-3 \
  --out "$work/runs/two_heads" \
  > "$work/two_heads.log" 2>&1
# A masked-LM run: the page's model box fills its masks.
"$tfm" train --config configs/shakespeare_mlm.json --set data.path=tests/data/tiny_shakespeare.txt \
  --set model.d_model=32 --set model.n_layers=1 --set model.max_seq_len=32 --set train.seq_len=32 \
  --set train.max_steps=20 \
  --set train.eval_interval=20 --set train.threads=1 --out "$work/runs/mlm" > "$work/mlm.log" 2>&1
# A run killed at step 50 with its last checkpoint at 40: two records past the checkpoint (loss 99) that
# the browser's `tfm train --resume` rewrites; the page must drop them and fetch the new ones.
"$tfm" train "${tiny[@]}" --set train.max_steps=40 --out "$work/runs/resumed" > "$work/resumed.log" 2>&1
for step in 45 50; do
  echo "{\"step\": $step, \"train_loss\": 99.0, \"train_loss_avg\": 99.0, \"elapsed_s\": 1.0}" \
    >> "$work/runs/resumed/metrics.jsonl"
done
"$tfm" board --runs "$work/runs" --port 0 > "$work/board.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*/' "$work/board.log" || true)
  [[ -n $url ]] && break
  sleep 0.1
done
[[ -n $url ]] || { cat "$work/board.log"; echo "check_board.sh: the board did not start" >&2; exit 1; }
# A run that trains slowly while the page watches (a larger model, one thread).
"$tfm" train "${tiny[@]}" --set train.max_steps=100000 --set train.log_interval=20 --set model.d_model=128 \
  --out "$work/runs/live" > "$work/live.log" 2>&1 &
pids+=($!)

# ---- 3. the browser ----
shots=$work/screenshots
mkdir -p "$shots"
TFM_CHECK_BINARY=$tfm TFM_CHECK_RESUME=$work/runs/resumed NODE_PATH=$home/node_modules \
  node "$root/scripts/dev/check_board.mjs" "$url" "$(command -v chromium)" "$shots"
if [[ ${TFM_BOARD_SCREENSHOT:-0} == 1 ]]; then cp "$shots/board.png" "$root/docs/board.png"; fi
echo "check_board.sh: passed (screenshots in $shots)"
