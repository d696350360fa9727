#!/usr/bin/env bash
# `tfm board` on 20 runs: its start-up time (from exec to the line with its address), the page's load time
# in headless Chromium (bench_board.mjs: until the runs table holds every run and the loss chart the first
# run's points) and the server's memory (peak and current RSS after the page loaded), each the median of
# --repeat starts. The runs are tiny (configs/tiny.json, 200 steps logged at every step: 200 points each).
# Usage: scripts/dev/bench_board.sh [--runs N] [--repeat K] [TFM_BINARY]
# Needs chromium and puppeteer-core as check_board.sh installs them; without them the page load is skipped.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
runs=20 repeat=5 binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) binary=$1; shift ;;
  esac
done
tfm_find_binary "$binary"
tfm=$TFM_BIN
home=${TFM_PUPPETEER:-${XDG_CACHE_HOME:-$HOME/.cache}/tfm/puppeteer}
work=$(mktemp -d "${TMPDIR:-/tmp}/tfm_bench_board.XXXXXX")
board=""
cleanup() {
  [[ -n $board ]] && kill "$board" 2>/dev/null && wait "$board" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cd "$TFM_ROOT"
for i in $(seq "$runs"); do
  "$tfm" train --config configs/tiny.json --set seed="$i" --set train.max_steps=200 --set train.log_interval=1 \
    --set train.threads=1 --out "$work/runs/run_$i" > /dev/null 2>&1
done
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
page=0
if command -v chromium >/dev/null && [[ -d $home/node_modules/puppeteer-core ]]; then page=1; fi
: > "$work/startup" && : > "$work/load" && : > "$work/peak" && : > "$work/rss"
for _ in $(seq "$repeat"); do
  # Its first line through a pipe: read blocks until it is written, no polling.
  rm -f "$work/out" && mkfifo "$work/out"
  t0=$(date +%s%N)
  "$tfm" board --runs "$work/runs" --port 0 > "$work/out" 2>&1 &
  board=$!
  exec 3< "$work/out"
  read -r line <&3 || { echo "bench_board.sh: the board did not start" >&2; exit 1; }
  echo $((($(date +%s%N) - t0) / 1000000)) >> "$work/startup"
  url=$(grep -o 'http://127.0.0.1:[0-9]*/' <<< "$line")
  if [[ $page == 1 ]]; then
    NODE_PATH=$home/node_modules node "$TFM_ROOT/scripts/dev/bench_board.mjs" "$url" "$(command -v chromium)" \
      "$runs" >> "$work/load"
  else
    curl -s "${url}api/runs" > /dev/null
  fi
  awk '/VmHWM/ {print $2}' "/proc/$board/status" >> "$work/peak"
  awk '/VmRSS/ {print $2}' "/proc/$board/status" >> "$work/rss"
  kill -INT "$board" && wait "$board" || true
  exec 3<&-
  board=""
done
echo "tfm board on $runs runs, median of $repeat starts ($(grep -o -m1 'model name.*' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores):"
echo "  start-up (exec to listening): $(median < "$work/startup") ms"
if [[ $page == 1 ]]; then echo "  page load (table and first chart): $(median < "$work/load") ms"; fi
echo "  memory: peak RSS $(($(median < "$work/peak") / 1024)) MiB, RSS after the page $(($(median < "$work/rss") / 1024)) MiB"
