#!/usr/bin/env bash
# Where a training step's time goes: samples `tfm train` with perf from the end of the first steps
# (start-up, first-touch page faults and the primitive caches out of the picture) to the end of the
# next-to-last one (the final evaluation and checkpoint out of it too), and sorts the samples into
# what a step is made of: matrix products, bfloat16 rounding, attention, elementwise math, the
# optimizer, memory traffic, the OpenMP runtime and the OS.
#
#   scripts/dev/profile.sh configs/shakespeare_char.json                       # 300 steps, 100 skipped
#   scripts/dev/profile.sh configs/shakespeare_char_large.json --set train.precision=bf16
#   TFM_PROFILE_STEPS=12 TFM_PROFILE_SKIP=3 scripts/dev/profile.sh configs/shakespeare_char_large.json
#
# Extra arguments go to `tfm train` (--set KEY=VALUE ...). Environment: TFM_PROFILE_STEPS (steps run;
# default 300, or 10 for configs over 5M parameters), TFM_PROFILE_SKIP (steps before sampling starts;
# default a third), TFM_PROFILE_KEEP=1 keeps the perf data and prints its path. Needs perf (Debian's
# linux-perf; installed when missing) and kernel.perf_event_paranoid <= 2 for a process of your own.
# The table's ms column is the category's share of the sampled steps' mean ms/step from train.log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TFM_ROOT"

[ $# -ge 1 ] || { tfm_usage; exit 2; }
config="$1"
shift
tfm_require_config "$config"
command -v perf >/dev/null || tfm_install linux-perf
tfm_prepare

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The step count: a large model's steps take seconds each.
params="$("$TFM_BIN" info --config "$config" "$@" --json 2>/dev/null |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["parameters"])' 2>/dev/null || echo 0)"
default_steps=300
[ "$params" -gt 5000000 ] && default_steps=10
steps="${TFM_PROFILE_STEPS:-$default_steps}"
skip="${TFM_PROFILE_SKIP:-$((steps / 3))}"
last=$((steps - 1))
[ "$skip" -lt "$last" ] || tfm_fail "TFM_PROFILE_SKIP ($skip) must be below the steps - 1 ($last)"

"$TFM_BIN" train --config "$config" --out "$work/run" "$@" --set train.max_steps="$steps" \
  --set train.log_interval=1 --set train.eval_interval=1000000 --set train.eval_steps=1 \
  --set train.checkpoint_interval=0 >"$work/train.out" 2>&1 &
pid=$!
# Waits until step $1 has been logged (the trainer's own log line: "step K/N | loss ...").
wait_for_step() {
  until grep -q "^step $1/$steps | loss" "$work/train.out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/train.out" >&2; echo "profile.sh: training ended early" >&2; exit 1; }
    sleep 0.05
  done
}
wait_for_step "$skip"
perf record -F 999 -o "$work/perf.data" -p "$pid" >/dev/null 2>"$work/perf.err" &
perf_pid=$!
wait_for_step "$last"
kill -INT "$perf_pid" 2>/dev/null || true  # perf may have ended already (the run did)
wait "$perf_pid" || true
wait "$pid" || { cat "$work/train.out" >&2; exit 1; }
if [ ! -s "$work/perf.data" ]; then
  cat "$work/perf.err" >&2
  if grep -q 'No such process' "$work/perf.err"; then
    echo "profile.sh: the run ended before perf could attach: give it more steps (TFM_PROFILE_STEPS)" >&2
  else
    echo "profile.sh: perf recorded nothing (kernel.perf_event_paranoid?)" >&2
  fi
  exit 1
fi

head -n 4 "$work/train.out" | grep -E '^(model|compute|batch):' || true
perf report -i "$work/perf.data" --no-children --sort dso,sym -g none --stdio -t $'\t' 2>/dev/null |
  /usr/bin/python3 "$TFM_ROOT/scripts/dev/profile_categories.py" "$work/run/train.log" "$skip" "$last"
if [ "${TFM_PROFILE_KEEP:-0}" = 1 ]; then
  cp "$work/perf.data" "$TFM_ROOT/perf.data.profile" && echo "perf data: $TFM_ROOT/perf.data.profile (perf report -i ...)"
fi
