#!/usr/bin/env bash
# Time to quality: how long tfm takes to train a config to a target validation loss, and how long the
# PyTorch reference (scripts/torch_lm.py) takes on the same recipe, on this machine, one after the
# other; then their ratio. The clock is the user's: from the first step to the end of the evaluation
# that reached the target, evaluations included (train.eval_interval steps apart, train.eval_steps
# batches each). tfm's model at the target is confirmed on 200 validation batches (best.ckpt).
#
#   scripts/speedrun.sh [CONFIG] [--target X] [--precision fp32|bf16|auto] [--baseline] [--max-minutes M]
#                       [--threads N] [--no-torch] [--figure]
#
#   CONFIG        default configs/shakespeare_speedrun.json
#   --target X    val loss to reach (default: the config's train.target_loss, else 1.5)
#   --precision P the matrix products of both sides, overriding the config's train.precision, whose "auto"
#                 tfm resolves at start-up (bf16 with AVX512_BF16 or AMX, else fp32) for both (PyTorch:
#                 --bf16 autocast or float32). On a CPU without AVX-512 bf16 only emulates (tfm logs it):
#                 fp32 is faster there, in both
#   --baseline    also time PyTorch on nanoGPT's recipe (configs/shakespeare_char_large.json, --bf16) to
#                 the same target: hours here, so it stops at --max-minutes and reports the val reached
#   --max-minutes M   time limit of each PyTorch run (default 240): one that stops there reports the val
#                 reached, and tfm's lead is then a lower bound
#   --threads N   threads for both (default: all cores)
#   --no-torch    tfm alone
#   --figure      also train the default recipe at the same shape, steps and parameters (sinusoidal
#                 positions, LayerNorm, GELU, biases, tied head, AdamW 1e-3, cosine: the "default" of
#                 scripts/recipe_variants.py) in tfm and PyTorch, for the figure (~3x the time)
# Results: a table on stdout, and runs/speedrun/<config>-<date>/{tfm/, torch.jsonl, baseline.jsonl,
# summary.json, curves.svg}: curves.svg is val loss against wall-clock minutes of every run made
# (tfm plot speedrun).
# Needs /usr/bin/python3 with torch for the PyTorch side (apt-get install python3-torch python3-numpy).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

config="configs/shakespeare_speedrun.json"
target="" precision="" baseline=0 max_minutes=240 threads="$(nproc)" torch=1 figure=0
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;  # fp32, bf16 or auto
    --baseline) baseline=1; shift ;;
    --max-minutes) max_minutes="$2"; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --figure) figure=1; shift ;;
    *) tfm_experiment_arg "$@"; shift "$TFM_SHIFT" ;;
  esac
done
tfm_experiment_prepare
if [ "$torch" = 1 ] || [ "$baseline" = 1 ]; then
  if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo "speedrun.sh: no PyTorch for $py (apt-get install python3-torch python3-numpy); timing tfm alone" >&2
    torch=0 baseline=0
  fi
fi

json() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))' "$@"; }
out="runs/speedrun/$(basename "$config" .json)-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
# The config resolved once (every default filled in, --precision applied): both sides train from it.
source_config="$config"
"$tfm" config --config "$config" ${precision:+--set "train.precision=\"$precision\""} > "$out/config.json" ||
  { echo "speedrun.sh: $config does not resolve" >&2; exit 2; }
config="$out/config.json"
if [ -z "$target" ]; then
  target=$(json "$config" 'train["target_loss"] if train["target_loss"] > 0 else 1.5')
fi
echo "speedrun: $source_config to val loss <= $target, $threads thread(s), $(json "$config" 'train["precision"]'); results in $out"

# --- tfm ---
"$tfm" train --config "$config" --out "$out/tfm" --target-loss "$target" --set train.threads="$threads" \
  > "$out/tfm.log" 2>&1 || { tail -5 "$out/tfm.log" >&2; echo "speedrun.sh: tfm train failed ($out/tfm.log)" >&2; exit 1; }
"$py" - "$out/tfm/metrics.jsonl" > "$out/tfm_summary.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
evals = [r for r in rows if "val_loss" in r]
hit = [r for r in rows if "seconds_to_target" in r]
last = evals[-1]
print(json.dumps({"reached": bool(hit), "seconds": hit[0]["seconds_to_target"] if hit else last["training_s"],
                  "step": (hit or evals)[-1]["step"], "val_loss": (hit or evals)[-1]["val_loss"],
                  "curve": [[r["training_s"], r["val_loss"]] for r in evals]}))
EOF
confirm=$("$tfm" eval --run "$out/tfm" --checkpoint best --batches 200 | sed -n 's/^val loss \([0-9.]*\).*/\1/p')
# The precision tfm ran in (train.precision "auto" resolved at its start-up): PyTorch uses the same.
bf16=$(json "$out/tfm/config.json" 'train["precision"] == "bf16"')
tfm_s=$(json "$out/tfm_summary.json" seconds)
tfm_step=$(json "$out/tfm_summary.json" step)
tfm_reached=$(json "$out/tfm_summary.json" reached)
echo "tfm:     val <= $target reached=$tfm_reached at step $tfm_step after ${tfm_s} s; best.ckpt on 200 batches: $confirm"

# --- PyTorch, the same recipe ---
torch_s="" torch_step="" torch_reached=""
if [ "$torch" = 1 ]; then
  flag=""
  [ "$bf16" = True ] && flag="--bf16"
  "$py" scripts/torch_lm.py --config "$config" --target-loss "$target" --threads "$threads" $flag \
    --max-seconds "$((max_minutes * 60))" \
    > "$out/torch.jsonl" 2> "$out/torch.err" || { tail -5 "$out/torch.err" >&2; echo "speedrun.sh: torch_lm.py failed" >&2; exit 1; }
  summary=$(tail -1 "$out/torch.jsonl")
  torch_reached=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1]).get("reached") is not None)' "$summary")
  torch_s=$("$py" -c 'import json,sys; d=json.loads(sys.argv[1]); r=d.get("reached"); print(r["seconds"] if r else d["train_seconds"])' "$summary")
  torch_step=$("$py" -c 'import json,sys; d=json.loads(sys.argv[1]); r=d.get("reached"); print(r["step"] if r else d["steps"])' "$summary")
  echo "PyTorch: val <= $target reached=$torch_reached at step $torch_step after ${torch_s} s ($flag)"
fi

# --- PyTorch on nanoGPT's recipe ---
base_s="" base_note=""
if [ "$baseline" = 1 ]; then
  echo "baseline: PyTorch, configs/shakespeare_char_large.json --bf16, to val <= $target (limit $max_minutes min; hours)"
  "$py" scripts/torch_lm.py --config configs/shakespeare_char_large.json --bf16 --target-loss "$target" \
    --threads "$threads" --max-seconds "$((max_minutes * 60))" > "$out/baseline.jsonl" 2> "$out/baseline.err" || true
  summary=$(tail -1 "$out/baseline.jsonl")
  base_s=$("$py" -c 'import json,sys; d=json.loads(sys.argv[1]); r=d.get("reached"); print(r["seconds"] if r else d["train_seconds"])' "$summary")
  base_note=$("$py" -c 'import json,sys; d=json.loads(sys.argv[1]); r=d.get("reached"); l=d.get("time_limit"); print("reached at step %d" % r["step"] if r else "not reached: stopped at the time limit at step %d with val %.4f" % (l["step"], l["val_loss"]) if l else "not reached in train.max_steps, val %.4f" % d["val_loss"])' "$summary")
  echo "baseline: $base_note after ${base_s} s"
fi

# --- the default recipe, for the figure ---
curves=("tfm, $(basename "$source_config" .json)=$out/tfm")
[ "$torch" = 1 ] && curves+=("PyTorch, $(basename "$source_config" .json)=$out/torch.jsonl")
if [ "$figure" = 1 ]; then
  "$py" scripts/recipe_variants.py "$config" "$out/variants" --only default
  echo "figure: the default recipe (same shape and steps) in tfm$([ "$torch" = 1 ] && echo " and PyTorch")"
  "$tfm" train --config "$out/variants/default.json" --out "$out/tfm_default" --target-loss "$target" \
    --set train.threads="$threads" > "$out/tfm_default.log" 2>&1 || { tail -5 "$out/tfm_default.log" >&2; exit 1; }
  curves+=("tfm, default recipe=$out/tfm_default")
  if [ "$torch" = 1 ]; then
    flag=""
    [ "$bf16" = True ] && flag="--bf16"
    "$py" scripts/torch_lm.py --config "$out/variants/default.json" --target-loss "$target" --threads "$threads" \
      --max-seconds "$((max_minutes * 60))" $flag > "$out/torch_default.jsonl" 2> "$out/torch_default.err" || { tail -5 "$out/torch_default.err" >&2; exit 1; }
    curves+=("PyTorch, default recipe=$out/torch_default.jsonl")
  fi
fi
[ -n "$base_s" ] && curves+=("PyTorch, nanoGPT's recipe (large, bf16)=$out/baseline.jsonl")
"$tfm" plot speedrun --out "$out/curves.svg" --target "$target" --title "time to quality: $source_config" \
  "${curves[@]}" >/dev/null

"$py" - "$out" "$source_config" "$target" "$tfm_s" "$tfm_step" "$tfm_reached" "$confirm" "$torch_s" "$torch_step" \
  "$torch_reached" "$base_s" "$base_note" <<'EOF'
import json, sys
out, config, target, tfm_s, tfm_step, tfm_reached, confirm, torch_s, torch_step, torch_reached, base_s, base_note = sys.argv[1:]
f = lambda s: float(s) if s else None
rows = [("tfm", config, f(tfm_s), tfm_step, tfm_reached)]
if torch_s: rows.append(("PyTorch (scripts/torch_lm.py)", config, f(torch_s), torch_step, torch_reached))
if base_s: rows.append(("PyTorch, nanoGPT's recipe", "configs/shakespeare_char_large.json --bf16", f(base_s), "", base_note))
print()
print("| | config | minutes to val <= %s | steps | reached | tfm is faster by |" % target)
print("|---|---|---|---|---|---|")
for name, cfg, s, step, reached in rows:
    hit = reached == "True" or reached.startswith("reached")
    ratio = "" if name == "tfm" else "-" if tfm_reached != "True" else ("%.2fx" % (s / f(tfm_s)) + ("" if hit else " (at least)"))
    print("| %s | %s | %.2f | %s | %s | %s |" % (name, cfg, s / 60, step, reached, ratio))
print("\ntfm's best.ckpt on 200 validation batches: %s" % confirm)
# Two ratios that need no target: per step (medians), and at equal quality (the time tfm took to reach
# the val PyTorch ended with, against PyTorch's), the fair reading when PyTorch stopped at its limit.
if torch_s:
    lines = [json.loads(l) for l in open(out + "/torch.jsonl") if l.strip()]
    evals, summary = [l for l in lines if "val_loss" in l and "impl" not in l], lines[-1]
    ms = sorted(json.loads(l)["ms_per_step"] for l in open(out + "/tfm/metrics.jsonl") if '"ms_per_step"' in l)
    if ms and summary.get("ms_per_step_median"):
        print("per step: PyTorch %.1f ms, tfm %.1f ms (medians): tfm %.2fx faster"
              % (summary["ms_per_step_median"], ms[len(ms) // 2], summary["ms_per_step_median"] / ms[len(ms) // 2]))
    curve = json.load(open(out + "/tfm_summary.json"))["curve"]
    if evals:
        last = evals[-1]
        t = next((s for s, v in curve if v <= last["val_loss"]), None)
        print("at equal quality: PyTorch's last evaluation, val %.4f at step %d, took %.1f s; tfm reached it in %s"
              % (last["val_loss"], last["step"], last["seconds"],
                 "%.1f s: %.2fx faster" % (t, last["seconds"] / t) if t else "none of its evaluations"))
json.dump({"config": config, "target": float(target), "tfm": {"seconds": f(tfm_s), "step": tfm_step, "reached": tfm_reached == "True", "val_200": f(confirm)},
           "torch": {"seconds": f(torch_s), "step": torch_step, "reached": torch_reached == "True"} if torch_s else None,
           "baseline": {"seconds": f(base_s), "note": base_note} if base_s else None}, open(out + "/summary.json", "w"), indent=1)
EOF
echo "figure: $out/curves.svg"
