#!/usr/bin/env bash
# Ablation of the modern recipe: what each of its options is worth. Trains the config as it is, then
# once with each option removed (one at a time), and once with all of them removed (the default
# recipe, same shape and parameter count), every variant for the same wall time: the full recipe's.
# Reports, per variant: val loss at that equal time (last.ckpt on 200 validation batches), the
# minutes to reach --target (the first evaluation at or below it), steps and ms/step.
#
#   scripts/ablate.sh [CONFIG] [--target X] [--only NAME,...] [--threads N] [--out DIR]
#   scripts/ablate.sh [CONFIG] --steps N [--seeds K] [--only NAME,...] [--threads N] [--out DIR]
#
#   CONFIG      default configs/shakespeare_speedrun.json (any config using the modern options)
#   --target X  the val loss whose time is reported (default 1.60)
#   --only      the variants to run (full always runs first: it sets the time); names below
#   --threads N threads (default: all cores)
#   --out DIR   default runs/ablate/<config>-<date>; an existing DIR's finished variants are kept
#   --steps N   equal steps instead of equal time: every variant trains N steps (its schedule ends
#               there), evaluated on the whole validation split (train.eval_steps 0) every N/2 steps;
#               the val column is the last evaluation's (the EMA's weights where train.ema_decay is on)
#   --seeds K   with --steps: K seeds each (the config's seed, +1, ...), DIR/<variant>-s<seed>; the table
#               gives each seed's val, their mean and the mean's difference against full
#
# Variants (scripts/recipe_variants.py): full; rope -> sinusoidal; rmsnorm -> layernorm; swiglu -> gelu
# (d_ff x 1.5: the same parameters); no qk_norm; tied head; biases back; muon -> adamw (at the config's
# lr) and adamw at lr 1e-3; wsd -> cosine; default (all of them at once: adamw 1e-3, cosine); and the
# speedrun tricks the config turns on, one at a time (no_value_residual, no_bigram, no_x0_skip,
# no_softcap, no_mtp, no_momentum_schedule, no_cautious_wd, no_ema), and with_dropout and with_mtp
# (dropout 0.1, one multi-token head) where the config has none; with_mtp only when --only names it.
# Equal time: each variant's train.max_steps is the full recipe's time over its own ms/step (measured
# in a 40-step probe), so its schedule ends, decay included, when the time is up; train.max_seconds
# stops it there should the probe have been optimistic. Evaluations every 50 steps (10 batches).
# Results: a table on stdout, DIR/ablate.jsonl, DIR/ablate.svg (val loss against minutes).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

config="configs/shakespeare_speedrun.json" target=1.60 only="" threads="$(nproc)" out="" steps="" seeds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) tfm_value "$@"; steps="$2"; shift 2 ;;
    --seeds) tfm_value "$@"; seeds="$2"; shift 2 ;;
    --target) tfm_value "$@"; target="$2"; shift 2 ;;
    --only) tfm_value "$@"; only="$2"; shift 2 ;;
    --out) tfm_value "$@"; out="$(tfm_user_path "$2")"; shift 2 ;;
    *) tfm_experiment_arg "$@"; shift "$TFM_SHIFT" ;;
  esac
done
tfm_experiment_prepare
[ -n "$out" ] || out="runs/ablate/$(basename "$config" .json)-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/configs"

# The variants' configs: the resolved config with one option taken out.
"$tfm" config --config "$config" > "$out/configs/full.json"
"$py" scripts/recipe_variants.py "$out/configs/full.json" "$out/configs" --only "$only"

common=(--set train.threads="$threads" --set train.eval_interval=50 --set train.eval_steps=10
        --set train.target_loss=0 --set train.checkpoint_interval=0 --set train.log_interval=10)
metric() { "$py" -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(eval(sys.argv[2]))' "$@"; }

if [ -n "$steps" ]; then
  [[ "$steps" =~ ^[1-9][0-9]*$ ]] || tfm_fail "--steps: a positive whole number, not '$steps'"
  [[ "$seeds" =~ ^[1-9][0-9]*$ ]] || tfm_fail "--seeds: a positive whole number, not '$seeds'"
  seed0=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["seed"])' "$out/configs/full.json")
  interval=$(( steps / 2 > 0 ? steps / 2 : 1 ))
  while read -r name; do
    for ((k = 0; k < seeds; k++)); do
      seed=$((seed0 + k)) dir="$out/$name-s$((seed0 + k))"
      if [ -f "$dir/ablate.json" ]; then echo "ablate: $name seed $seed done before"; continue; fi
      rm -rf "$dir"
      "$tfm" train --config "$out/configs/$name.json" --out "$dir" --set train.threads="$threads" \
        --set seed="$seed" --set train.max_steps="$steps" --set train.eval_steps=0 \
        --set train.eval_interval="$interval" --set train.target_loss=0 --set train.max_seconds=0 \
        --set train.checkpoint_interval=0 --set train.log_interval=10 > "$dir.log" 2>&1 ||
        { tail -3 "$dir.log" >&2; echo "ablate.sh: $name seed $seed failed ($dir.log)" >&2; exit 1; }
      metric "$dir/metrics.jsonl" 'json.dumps({"variant": sys.argv[3], "seed": int(sys.argv[4]),
        "val_full": [r for r in rows if "val_loss" in r][-1]["val_loss"], "steps": rows[-1]["step"],
        "minutes": rows[-1]["training_s"] / 60})' "$name" "$seed" > "$dir/ablate.json"
      cat "$dir/ablate.json"
    done
  done < "$out/configs/order"
  "$py" - "$out" "$steps" "$seeds" "$seed0" <<'EOF'
import json, os, sys
out, steps, seeds, seed0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = open(os.path.join(out, "configs", "order")).read().split()
sys.path.insert(0, "scripts")
from recipe_variants import WHAT as what
rows = {n: [json.load(open(os.path.join(out, "%s-s%d" % (n, seed0 + k), "ablate.json"))) for k in range(seeds)]
        for n in names}
mean = {n: sum(r["val_full"] for r in rs) / len(rs) for n, rs in rows.items()}
print("\n| variant | what changed | val at step %d, whole split (seeds %s) | mean | vs full |"
      % (steps, ", ".join(str(seed0 + k) for k in range(seeds))))
print("|---|---|---|---|---|")
for n in names:
    print("| %s | %s | %s | %.4f | %+.4f |" % (n, what.get(n, ""), " / ".join("%.4f" % r["val_full"] for r in rows[n]),
          mean[n], mean[n] - mean["full"]))
with open(os.path.join(out, "ablate.jsonl"), "w") as f:
    for n in names:
        for r in rows[n]:
            f.write(json.dumps(r) + "\n")
EOF
  args=()
  while read -r name; do args+=("$out/$name-s$seed0"); done < "$out/configs/order"
  "$tfm" plot loss --out "$out/ablate.svg" --title "ablation at $steps steps: $(basename "$config")" "${args[@]}" >/dev/null
  echo "wrote $out/ablate.jsonl, $out/ablate.svg"
  exit 0
fi

budget=""
while read -r name; do
  dir="$out/$name"
  if [ -f "$dir/ablate.json" ]; then
    echo "ablate: $name done before"
  else
    rm -rf "$dir" "$dir.probe"
    sets=()
    if [ "$name" != full ]; then
      # Equal time: max_steps from this variant's own ms/step.
      "$tfm" train --config "$out/configs/$name.json" --out "$dir.probe" "${common[@]}" \
        --set train.max_steps=40 --set train.eval_interval=1000 > "$dir.probe.log" 2>&1
      ms=$(metric "$dir.probe/metrics.jsonl" 'sorted(r["ms_per_step"] for r in rows[1:])[len(rows[1:]) // 2]')
      rm -rf "$dir.probe" "$dir.probe.log"
      steps=$("$py" -c "import sys; print(int(float(sys.argv[1]) * 0.95 * 1e3 / float(sys.argv[2]) / 1.07))" "$budget" "$ms")
      sets=(--set train.max_steps="$steps" --set train.max_seconds="$budget")
      echo "ablate: $name: $ms ms/step in the probe -> $steps steps in ${budget} s"
    fi
    "$tfm" train --config "$out/configs/$name.json" --out "$dir" "${common[@]}" "${sets[@]}" > "$dir.log" 2>&1 ||
      { tail -3 "$dir.log" >&2; echo "ablate.sh: $name failed ($dir.log)" >&2; exit 1; }
    val=$("$tfm" eval --run "$dir" --checkpoint last --batches 200 | sed -n 's/^val loss \([0-9.]*\).*/\1/p')
    metric "$dir/metrics.jsonl" 'json.dumps({"variant": sys.argv[3], "val_200": float(sys.argv[4]),
      "minutes": rows[-1]["training_s"] / 60, "steps": rows[-1]["step"],
      "ms_per_step": sorted(r["ms_per_step"] for r in rows)[len(rows) // 2],
      "minutes_to_target": next((r["training_s"] / 60 for r in rows if r.get("val_loss", 9) <= float(sys.argv[5])), None),
      "target": float(sys.argv[5])})' "$name" "$val" "$target" > "$dir/ablate.json"
  fi
  [ -n "$budget" ] || budget=$(metric "$out/full/metrics.jsonl" 'rows[-1]["training_s"]')
  cat "$dir/ablate.json"
done < "$out/configs/order"

"$py" - "$out" "$target" <<'EOF'
import json, os, sys
out, target = sys.argv[1], float(sys.argv[2])
names = open(os.path.join(out, "configs", "order")).read().split()
rows = [json.load(open(os.path.join(out, n, "ablate.json"))) for n in names]
sys.path.insert(0, "scripts")
from recipe_variants import WHAT as what
full = rows[0]
print("\n| variant | what changed | val at %.1f min (200 batches) | vs full | minutes to val <= %g | steps | ms/step |"
      % (full["minutes"], target))
print("|---|---|---|---|---|---|---|")
for r in rows:
    t = r["minutes_to_target"]
    print("| %s | %s | %.4f | %+.4f | %s | %d | %.1f |" % (r["variant"], what.get(r["variant"], ""), r["val_200"],
          r["val_200"] - full["val_200"], "%.2f" % t if t is not None else "not reached", r["steps"], r["ms_per_step"]))
with open(os.path.join(out, "ablate.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
EOF
args=()
while read -r name; do args+=("$name=$out/$name"); done < "$out/configs/order"
"$tfm" plot speedrun --out "$out/ablate.svg" --target "$target" --title "ablation: $(basename "$config")" \
  "${args[@]}" >/dev/null
echo "wrote $out/ablate.jsonl"
