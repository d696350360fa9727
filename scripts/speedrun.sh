#!/usr/bin/env bash
# Time to quality: how many steps and how long tfm takes to train a config to a target validation loss,
# over several seeds (mean and spread); then PyTorch (scripts/torch_lm.py) on the same recipe side by
# side: both train the same steps one after the other and their median step times give the per-step
# ratio. The clock is the user's: from the first step to the end of the evaluation that reached the
# target, evaluations included (train.eval_interval steps apart; train.eval_steps 0 = the whole
# validation split, the yardstick of the records).
#
#   scripts/speedrun.sh [CONFIG] [--seeds K] [--target X] [--precision fp32|bf16|auto] [--out DIR]
#                       [--torch-steps N | --torch-to-target [--max-minutes M]] [--baseline]
#                       [--threads N] [--no-torch] [--figure]
#   scripts/speedrun.sh --figures RUNS_DIR [--figures-out DIR]
#
#   CONFIG        default configs/shakespeare_speedrun.json
#   --seeds K     train K seeds (the config's seed, +1, ...; default 1): DIR/tfm_s<seed>; the table gives
#                 each seed's steps and minutes to the target, their mean and spread (min-max)
#   --target X    val loss to reach (default: the config's train.target_loss, else 1.5)
#   --precision P the matrix products of both sides, overriding the config's train.precision, whose "auto"
#                 tfm resolves at start-up (bf16 with AVX512_BF16 or AMX, else fp32) for both (PyTorch:
#                 --bf16 autocast or float32). On a CPU without AVX-512 bf16 only emulates (tfm logs it):
#                 fp32 is faster there, in both
#   --out DIR     where the runs go (default runs/speedrun/<config>-<date>)
#   --torch-steps N   the side by side (default 100): tfm and PyTorch each train N steps of the resolved
#                 recipe (no evaluation), DIR/side/; per-step ratio = PyTorch's median step / tfm's
#   --torch-to-target PyTorch trains to the target too (hours at this size), instead of the side by side
#   --max-minutes M   time limit of each PyTorch run to the target (default 240): one that stops there
#                 reports the val reached, and tfm's lead is then a lower bound
#   --baseline    also time PyTorch on nanoGPT's recipe (configs/shakespeare_char_large.json, --bf16) to
#                 the same target: hours here, so it stops at --max-minutes and reports the val reached
#   --threads N   threads for both (default: all cores)
#   --no-torch    tfm alone
#   --figure      also train the default recipe at the same shape, steps and parameters (sinusoidal
#                 positions, LayerNorm, GELU, biases, tied head, AdamW 1e-3, cosine, no tricks: the
#                 "default" of scripts/recipe_variants.py) in tfm (and PyTorch with --torch-to-target)
#   --figures RUNS_DIR  train nothing: draw docs/speedrun.md's figures (into --figures-out, default docs/)
#                 from the run directories under RUNS_DIR and print their tables:
#                   RUNS_DIR/record/tfm_s*/  the record's seeds (this script --seeds K --out RUNS_DIR/record)
#                                 -> speedrun_record.svg (val against steps), speedrun_minutes.svg
#                   RUNS_DIR/search/*/       the search's runs (any tfm run directories; a sweep's points)
#                                 -> speedrun_search.svg
#                   RUNS_DIR/ablation/       scripts/ablate.sh --steps N --seeds K --out RUNS_DIR/ablation
#                                 -> ablation_speedrun.svg
#                   RUNS_DIR/best/*/         configs/shakespeare_best.json's runs -> speedrun_best.svg
# Results: a table on stdout, and DIR/{tfm_s*/, side/, torch.jsonl, summary.json, curves.svg}: curves.svg
# is val loss against wall-clock minutes of every run made (tfm plot speedrun).
# Needs /usr/bin/python3 with torch for the PyTorch side (apt-get install python3-torch python3-numpy).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

config="configs/shakespeare_speedrun.json"
target="" precision="" baseline=0 max_minutes=240 threads="$(nproc)" torch=1 figure=0 seeds=1 out=""
torch_steps=100 torch_to_target=0 figures="" figures_out="docs"
while [ $# -gt 0 ]; do
  case "$1" in
    --target) tfm_value "$@"; target="$2"; shift 2 ;;
    --precision) tfm_value "$@"; precision="$2"; shift 2 ;;  # fp32, bf16 or auto
    --seeds) tfm_value "$@"; seeds="$2"; shift 2 ;;
    --out) tfm_value "$@"; out="$(tfm_user_path "$2")"; shift 2 ;;
    --torch-steps) tfm_value "$@"; torch_steps="$2"; shift 2 ;;
    --torch-to-target) torch_to_target=1; shift ;;
    --baseline) baseline=1; shift ;;
    --max-minutes) tfm_value "$@"; max_minutes="$2"; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --figure) figure=1; shift ;;
    --figures) tfm_value "$@"; figures="$(tfm_user_path "$2")"; shift 2 ;;
    --figures-out) tfm_value "$@"; figures_out="$(tfm_user_path "$2")"; shift 2 ;;
    *) tfm_experiment_arg "$@"; shift "$TFM_SHIFT" ;;
  esac
done
[[ "$seeds" =~ ^[1-9][0-9]*$ ]] || tfm_fail "--seeds: a positive whole number, not '$seeds'"
[[ "$torch_steps" =~ ^[1-9][0-9]*$ ]] || tfm_fail "--torch-steps: a positive whole number, not '$torch_steps'"

# --- figures and tables from existing run directories (no training) ---
if [ -n "$figures" ]; then
  [ -d "$figures" ] || tfm_fail "--figures: $figures is not a directory"
  tfm_find_binary
  tfm="$TFM_BIN" py=/usr/bin/python3
  mkdir -p "$figures_out"
  runs_in() { find "$1" -mindepth 1 -maxdepth 1 -type d -exec test -f '{}/metrics.jsonl' ';' -print 2>/dev/null | sort; }
  mapfile -t record < <(runs_in "$figures/record" | grep '/tfm_s[0-9]*$' || true)
  if [ ${#record[@]} -gt 0 ]; then
    "$tfm" plot loss --out "$figures_out/speedrun_record.svg" --title "the record, val on the whole split" \
      "${record[@]}" >/dev/null
    labels=()
    for r in "${record[@]}"; do labels+=("$(basename "$r")=$r"); done
    "$tfm" plot speedrun --out "$figures_out/speedrun_minutes.svg" --target 1.5 \
      --title "the record: val against minutes (machine shared)" "${labels[@]}" >/dev/null
  fi
  mapfile -t search < <(runs_in "$figures/search")
  [ ${#search[@]} -eq 0 ] || "$tfm" plot loss --out "$figures_out/speedrun_search.svg" \
    --title "the search: val on the whole split" "${search[@]}" >/dev/null
  if [ -f "$figures/ablation/configs/order" ]; then
    args=()
    while read -r name; do
      first=$(find "$figures/ablation" -mindepth 1 -maxdepth 1 -type d -name "$name-s*" | sort | head -1)
      [ -n "$first" ] && args+=("$first")
    done < "$figures/ablation/configs/order"
    [ ${#args[@]} -eq 0 ] || "$tfm" plot loss --out "$figures_out/ablation_speedrun.svg" \
      --title "ablation: each trick removed, first seed" "${args[@]}" >/dev/null
  fi
  mapfile -t best < <(runs_in "$figures/best")
  [ ${#best[@]} -eq 0 ] || "$tfm" plot loss --out "$figures_out/speedrun_best.svg" \
    --title "configs/shakespeare_best.json, val on the whole split" "${best[@]}" >/dev/null
  "$py" - "$figures" <<'EOF'
import glob, json, os, statistics, sys
root = sys.argv[1]
def rows(run):
    return [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
def summary(run, target=1.5):
    r = rows(run)
    ev = [x for x in r if "val_loss" in x]
    hit = next((x for x in ev if x["val_loss"] <= target), None)
    ms = sorted(x["ms_per_step"] for x in r if "ms_per_step" in x)
    return {"run": os.path.basename(run), "hit": hit, "last": ev[-1] if ev else None, "best": min(x["val_loss"] for x in ev) if ev else None,
            "ms": ms[len(ms) // 2] if ms else None, "steps": r[-1].get("step")}
def table(title, runs):
    if not runs:
        return
    print("\n%s\n\n| run | steps to val <= 1.50 | minutes to it | val there | last val (step) | ms/step (median) |" % title)
    print("|---|---|---|---|---|---|")
    for run in runs:
        s = summary(run)
        h, l = s["hit"], s["last"]
        print("| %s | %s | %s | %s | %s | %s |" % (s["run"], h["step"] if h else "not reached",
              "%.2f" % (h["training_s"] / 60) if h else "-", "%.4f" % h["val_loss"] if h else "-",
              "%.4f (%d)" % (l["val_loss"], l["step"]) if l else "-", "%.0f" % s["ms"] if s["ms"] else "-"))
    hits = [summary(r)["hit"] for r in runs]
    if len(runs) > 1 and all(hits):
        st = [h["step"] for h in hits]
        mi = [h["training_s"] / 60 for h in hits]
        print("| mean (min-max) | %.0f (%d-%d) | %.2f (%.2f-%.2f) | %.4f | | |" % (statistics.mean(st), min(st), max(st),
              statistics.mean(mi), min(mi), max(mi), statistics.mean(h["val_loss"] for h in hits)))
isrun = lambda d: os.path.isfile(os.path.join(d, "metrics.jsonl"))
table("## the record (%s/record)" % root, sorted(d for d in glob.glob(os.path.join(root, "record", "tfm_s*")) if isrun(d)))
table("## the search (%s/search)" % root, sorted(d for d in glob.glob(os.path.join(root, "search", "*")) if isrun(d)))
table("## configs/shakespeare_best.json (%s/best)" % root, sorted(d for d in glob.glob(os.path.join(root, "best", "*")) if isrun(d)))
side = os.path.join(root, "record", "side", "summary.json")
if os.path.isfile(side):
    print("\n## side by side\n\n" + open(side).read())
abl = os.path.join(root, "ablation", "ablate.jsonl")
if os.path.isfile(abl):
    sys.path.insert(0, "scripts")
    from recipe_variants import WHAT as what
    rs = [json.loads(l) for l in open(abl) if l.strip()]
    names = list(dict.fromkeys(r["variant"] for r in rs))
    by = {n: [r for r in rs if r["variant"] == n] for n in names}
    mean = {n: statistics.mean(r["val_full"] for r in by[n]) for n in names}
    print("\n## the ablation (%s)\n\n| variant | what changed | val at step %d, whole split (per seed) | mean | vs full |" % (abl, rs[0]["steps"]))
    print("|---|---|---|---|---|")
    for n in names:
        print("| %s | %s | %s | %.4f | %+.4f |" % (n, what.get(n, ""), " / ".join("%.4f" % r["val_full"] for r in by[n]),
              mean[n], mean[n] - mean.get("full", mean[n])))
EOF
  echo "figures: $(ls "$figures_out"/speedrun_*.svg "$figures_out"/ablation_speedrun.svg 2>/dev/null | tr '\n' ' ')"
  exit 0
fi

tfm_experiment_prepare
if [ "$torch" = 1 ] || [ "$baseline" = 1 ]; then
  if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo "speedrun.sh: no PyTorch for $py (apt-get install python3-torch python3-numpy); timing tfm alone" >&2
    torch=0 baseline=0
  fi
fi

json() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))' "$@"; }
[ -n "$out" ] || out="runs/speedrun/$(basename "$config" .json)-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
# The config resolved once (every default filled in, --precision applied): both sides train from it. Not
# named config.json, which would make $out look like a run directory to `tfm runs` and the board.
source_config="$config"
"$tfm" config --config "$config" ${precision:+--set "train.precision=\"$precision\""} > "$out/speedrun_config.json" ||
  { echo "speedrun.sh: $config does not resolve" >&2; exit 2; }
config="$out/speedrun_config.json"
if [ -z "$target" ]; then
  target=$(json "$config" 'train["target_loss"] if train["target_loss"] > 0 else 1.5')
fi
seed0=$(json "$config" seed)
echo "speedrun: $source_config to val loss <= $target, $seeds seed(s) from $seed0, $threads thread(s)," \
  "train.precision $(json "$config" 'train["precision"] + (" (decided by tfm at start-up)" if train["precision"] == "auto" else "")');" \
  "results in $out"

# --- tfm, each seed ---
tfm_runs=()
for ((k = 0; k < seeds; k++)); do
  seed=$((seed0 + k)) run="$out/tfm_s$((seed0 + k))"
  tfm_runs+=("$run")
  if [ -f "$run/summary.json" ]; then echo "tfm seed $seed: done before"; continue; fi
  rm -rf "$run"
  "$tfm" train --config "$config" --out "$run" --target-loss "$target" --set seed="$seed" \
    --set train.threads="$threads" > "$run.log" 2>&1 ||
    { tail -5 "$run.log" >&2; echo "speedrun.sh: tfm train failed ($run.log)" >&2; exit 1; }
  "$py" - "$run/metrics.jsonl" > "$run/summary.json" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
evals = [r for r in rows if "val_loss" in r]
hit = [r for r in rows if "seconds_to_target" in r]
ms = sorted(r["ms_per_step"] for r in rows if "ms_per_step" in r)
print(json.dumps({"reached": bool(hit), "seconds": hit[0]["seconds_to_target"] if hit else evals[-1]["training_s"],
                  "step": (hit or evals)[-1]["step"], "val_loss": (hit or evals)[-1]["val_loss"],
                  "ms_per_step_median": ms[len(ms) // 2] if ms else None,
                  "curve": [[r["training_s"], r["val_loss"]] for r in evals]}))
EOF
  echo "tfm seed $seed: $(json "$run/summary.json" '"reached" if reached else "NOT reached"') val <= $target at" \
    "step $(json "$run/summary.json" step), $(json "$run/summary.json" '"%.2f" % (seconds / 60)') min," \
    "val $(json "$run/summary.json" '"%.4f" % val_loss')"
done
# The precision tfm ran in (train.precision "auto" resolved at its start-up): PyTorch uses the same.
bf16=$(json "${tfm_runs[0]}/config.json" 'train["precision"] == "bf16"')
flag=""
[ "$bf16" = True ] && flag="--bf16"
echo "tfm trained in $([ "$bf16" = True ] && echo bf16 || echo fp32)"

# --- side by side: the same steps in both, per-step medians ---
side=""
if [ "$torch" = 1 ] && [ "$torch_to_target" = 0 ]; then
  side="$out/side"
  rm -rf "$side" && mkdir -p "$side"
  # Every step logged (train.log_interval 1), so that both sides give the same statistic: torch_lm.py's
  # upper median of every step of the run, first steps included (as scripts/bench.sh compares them).
  "$tfm" train --config "$config" --out "$side/tfm" --set train.max_steps="$torch_steps" \
    --set train.log_interval=1 --set train.eval_interval=1000000 --set train.target_loss=0 --set train.threads="$threads" \
    > "$side/tfm.log" 2>&1 || { tail -5 "$side/tfm.log" >&2; echo "speedrun.sh: tfm train failed" >&2; exit 1; }
  "$py" scripts/torch_lm.py --config "$config" --steps "$torch_steps" --eval-steps 1 --threads "$threads" $flag \
    > "$side/torch.jsonl" 2> "$side/torch.err" || { tail -5 "$side/torch.err" >&2; echo "speedrun.sh: torch_lm.py failed" >&2; exit 1; }
  "$py" - "$side" "$torch_steps" "$flag" <<'EOF' > "$side/summary.json"
import json, os, sys
side, steps, flag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tfm = [json.loads(l) for l in open(os.path.join(side, "tfm", "metrics.jsonl")) if '"ms_per_step"' in l]
ms = sorted(r["ms_per_step"] for r in tfm)  # one record a step: torch_lm.py's upper median, first steps included
torch = json.loads(open(os.path.join(side, "torch.jsonl")).read().strip().splitlines()[-1])
print(json.dumps({"steps": steps, "precision": "bf16" if flag else "fp32", "tfm_ms_per_step_median": ms[len(ms) // 2],
                  "torch_ms_per_step_median": torch["ms_per_step_median"],
                  "ratio": torch["ms_per_step_median"] / ms[len(ms) // 2]}))
EOF
  echo "side by side, $torch_steps steps each: $(json "$side/summary.json" '"tfm %.1f ms, PyTorch %.1f ms a step (medians): tfm %.2fx faster per step" % (tfm_ms_per_step_median, torch_ms_per_step_median, ratio)')"
fi

# --- PyTorch to the target, the same recipe (hours at the speedrun size) ---
torch_s="" torch_step="" torch_reached=""
if [ "$torch" = 1 ] && [ "$torch_to_target" = 1 ]; then
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
curves=()
for run in "${tfm_runs[@]}"; do curves+=("tfm, $(basename "$source_config" .json), $(basename "$run")=$run"); done
[ -n "$torch_s" ] && curves+=("PyTorch, $(basename "$source_config" .json)=$out/torch.jsonl")
if [ "$figure" = 1 ]; then
  "$py" scripts/recipe_variants.py "$config" "$out/variants" --only default
  echo "figure: the default recipe (same shape and steps) in tfm$([ -n "$torch_s" ] && echo " and PyTorch")"
  "$tfm" train --config "$out/variants/default.json" --out "$out/tfm_default" --target-loss "$target" \
    --set train.threads="$threads" > "$out/tfm_default.log" 2>&1 || { tail -5 "$out/tfm_default.log" >&2; exit 1; }
  curves+=("tfm, default recipe=$out/tfm_default")
  if [ -n "$torch_s" ]; then
    "$py" scripts/torch_lm.py --config "$out/variants/default.json" --target-loss "$target" --threads "$threads" \
      --max-seconds "$((max_minutes * 60))" $flag > "$out/torch_default.jsonl" 2> "$out/torch_default.err" || { tail -5 "$out/torch_default.err" >&2; exit 1; }
    curves+=("PyTorch, default recipe=$out/torch_default.jsonl")
  fi
fi
[ -n "$base_s" ] && curves+=("PyTorch, nanoGPT's recipe (large, bf16)=$out/baseline.jsonl")
"$tfm" plot speedrun --out "$out/curves.svg" --target "$target" --title "time to quality: $source_config" \
  "${curves[@]}" >/dev/null

"$py" - "$out" "$source_config" "$target" "$torch_s" "$torch_step" "$torch_reached" "$base_s" "$base_note" \
  "${tfm_runs[@]}" <<'EOF'
import json, statistics, sys
out, config, target, torch_s, torch_step, torch_reached, base_s, base_note = sys.argv[1:9]
runs = [json.load(open(r + "/summary.json")) | {"run": r} for r in sys.argv[9:]]
f = lambda s: float(s) if s else None
print()
print("| tfm run | reached val <= %s | steps | minutes | val there |" % target)
print("|---|---|---|---|---|")
for r in runs:
    print("| %s | %s | %d | %.2f | %.4f |" % (r["run"], r["reached"], r["step"], r["seconds"] / 60, r["val_loss"]))
all_reached = all(r["reached"] for r in runs)
steps, minutes = [r["step"] for r in runs], [r["seconds"] / 60 for r in runs]
record = {"seeds": len(runs), "all_reached": all_reached, "steps_mean": statistics.mean(steps), "steps_min": min(steps),
          "steps_max": max(steps), "minutes_mean": statistics.mean(minutes), "minutes_min": min(minutes),
          "minutes_max": max(minutes), "val_mean": statistics.mean(r["val_loss"] for r in runs)}
if len(runs) > 1:
    print("| mean (min-max) of %d seeds%s | | %.0f (%d-%d) | %.2f (%.2f-%.2f) | %.4f |" % (
        len(runs), "" if all_reached else ", NOT ALL REACHED", record["steps_mean"], min(steps), max(steps),
        record["minutes_mean"], min(minutes), max(minutes), record["val_mean"]))
tfm_s = runs[0]["seconds"] if runs[0]["reached"] else None
if torch_s:
    print("\nPyTorch to the target: %s at step %s after %.2f min%s" % ("reached" if torch_reached == "True" else "not reached",
          torch_step, f(torch_s) / 60, " (tfm's first seed: %.2fx faster)" % (f(torch_s) / tfm_s) if tfm_s else ""))
if base_s:
    print("PyTorch, nanoGPT's recipe: %s after %.2f min" % (base_note, f(base_s) / 60))
json.dump({"config": config, "target": float(target), "tfm": record, "runs": runs,
           "torch": {"seconds": f(torch_s), "step": torch_step, "reached": torch_reached == "True"} if torch_s else None,
           "baseline": {"seconds": f(base_s), "note": base_note} if base_s else None}, open(out + "/summary.json", "w"), indent=1)
EOF
echo "figure: $out/curves.svg"
