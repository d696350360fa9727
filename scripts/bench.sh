#!/usr/bin/env bash
# Times tfm against the PyTorch reference (scripts/torch_lm.py) on the same configs, the
# same machine and the same threads, in both precisions, alternating the four runs several times, and
# prints a table of medians.
#
#   scripts/bench.sh                                   # the two shipped Shakespeare configs
#   scripts/bench.sh configs/shakespeare_char.json     # one config
#
# Environment: TFM_BENCH_REPEATS (alternations, default 3), TFM_BENCH_STEPS_SMALL / _LARGE (steps per
# run for configs under / over 5M parameters; default 60 / 8), TFM_THREADS (default: all cores),
# TFM_BENCH_DATA_PARALLEL (tfm's train.data_parallel; default: the config's own, which for the shipped
# small configs is one worker per thread and for the large one 1 = off).
#
# What is measured: ms per training step (forward, backward, clipping, optimizer; no evaluation or
# checkpoint). Both sides use the reference's own statistic, the upper median of every step of a run
# (sorted(times)[n // 2], first steps included), then the median over the repeats.
# Four runs per repeat, in turn: tfm fp32, torch fp32, tfm bf16 (train.precision = "bf16"), torch bf16
# (torch_lm.py --bf16: torch.autocast). tfm runs as users run it (its own kernel and backend choice);
# the reference runs with OPENBLAS_CORETYPE=SkylakeX, its fastest fp32 kernels on AVX-512 CPUs.
# MFU is against the square-GEMM peak `tfm bench gemm` measures first for each precision (tfm's
# backend), for both programs. Peak RSS comes from /usr/bin/time -v. The last line is one JSON object.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(configs/shakespeare_char.json configs/shakespeare_char_large.json)
repeats="${TFM_BENCH_REPEATS:-3}"
threads="${TFM_THREADS:-$(nproc)}"
reference="$TFM_ROOT/scripts/torch_lm.py"

tfm_prepare time python3-torch python3-numpy
tfm="$TFM_BIN"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# tfm as users run it: no inherited kernel override, so it chooses.
run_tfm() { env -u OPENBLAS_CORETYPE -u TFM_REEXEC "$tfm" "$@"; }

echo "tfm bench: $(nproc) cores, $threads threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "tfm train.data_parallel ${TFM_BENCH_DATA_PARALLEL:-as each config sets or derives it}"
run_tfm bench gemm --threads "$threads" --json >"$work/gemm.json"
read -r backend peak_fp32 peak_bf16 < <(/usr/bin/python3 - "$work/gemm.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
peak = {m["precision"]: m["peak_gflops"] for m in g["modes"] if m["backend"] == g["default_backend"]}
print(g["default_backend"], peak["fp32"], peak["bf16"])
PY
)
echo "measured peaks ($backend, n = 1024, $threads threads): fp32 $peak_fp32 GFLOP/s, bf16 $peak_bf16 GFLOP/s"

# Prints "ms_per_step tokens_per_s rss_kb" for one tfm run of config $1 with $2 steps in precision $3.
bench_ours() {
  local config="$1" steps="$2" precision="$3" out="$work/run_$RANDOM"
  /usr/bin/time -v -o "$work/time.txt" env -u OPENBLAS_CORETYPE -u TFM_REEXEC "$tfm" train --config "$config" \
    --out "$out" --set train.max_steps="$steps" --set train.log_interval=1 --set train.eval_interval="$steps" \
    --set train.eval_steps=1 --set train.checkpoint_interval=0 --set train.threads="$threads" --set train.precision="$precision" \
    ${TFM_BENCH_DATA_PARALLEL:+--set train.data_parallel="$TFM_BENCH_DATA_PARALLEL"} >/dev/null 2>&1
  /usr/bin/python3 - "$out/metrics.jsonl" "$work/time.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
times = sorted(r["ms_per_step"] for r in rows)
ms = times[len(times) // 2]  # as torch_lm.py computes its ms_per_step_median
tokens_per_step = rows[-1]["tokens_per_s"] * rows[-1]["ms_per_step"] / 1e3
rss = next(int(l.split(":")[1]) for l in open(sys.argv[2]) if "Maximum resident" in l)
print(ms, tokens_per_step / (ms / 1e3), rss)
PY
}

# Prints "ms_per_step tokens_per_s rss_kb" for one reference run; $3 = extra arguments (--bf16).
bench_ref() {
  local config="$1" steps="$2"
  shift 2
  OPENBLAS_CORETYPE=SkylakeX /usr/bin/time -v -o "$work/time.txt" /usr/bin/python3 "$reference" --config "$config" \
    --steps "$steps" --threads "$threads" --eval-steps 1 "$@" >"$work/ref.json" 2>"$work/ref.err" ||
    { cat "$work/ref.err" >&2; exit 1; }
  /usr/bin/python3 - "$work/ref.json" "$work/time.txt" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
rss = next(int(l.split(":")[1]) for l in open(sys.argv[2]) if "Maximum resident" in l)
print(r["ms_per_step_median"], r["tokens_per_s"], rss)
PY
}

summary="$work/summary.jsonl"
: >"$summary"
for config in "${configs[@]}"; do
  run_tfm info --config "$config" --json >"$work/info.json"
  read -r params flops < <(/usr/bin/python3 -c "import json;i=json.load(open('$work/info.json'));print(i['parameters'], i['train_flops_per_token'])")
  if [ "$params" -gt 5000000 ]; then steps="${TFM_BENCH_STEPS_LARGE:-8}"; else steps="${TFM_BENCH_STEPS_SMALL:-60}"; fi
  echo "== $config ($params parameters, $steps steps per run, $repeats repeats)"
  for r in $(seq "$repeats"); do
    read -r of_ms of_tok of_rss < <(bench_ours "$config" "$steps" fp32)
    read -r rf_ms rf_tok rf_rss < <(bench_ref "$config" "$steps")
    read -r ob_ms ob_tok ob_rss < <(bench_ours "$config" "$steps" bf16)
    read -r rb_ms rb_tok rb_rss < <(bench_ref "$config" "$steps" --bf16)
    printf '  repeat %d: ms/step tfm fp32 %.1f | torch fp32 %.1f | tfm bf16 %.1f | torch bf16 %.1f\n' \
      "$r" "$of_ms" "$rf_ms" "$ob_ms" "$rb_ms"
    echo "{\"config\":\"$config\",\"params\":$params,\"flops_per_token\":$flops,\"tfm_fp32\":[$of_ms,$of_tok,$of_rss],\"torch_fp32\":[$rf_ms,$rf_tok,$rf_rss],\"tfm_bf16\":[$ob_ms,$ob_tok,$ob_rss],\"torch_bf16\":[$rb_ms,$rb_tok,$rb_rss]}" >>"$summary"
  done
done

/usr/bin/python3 - "$summary" "$peak_fp32" "$peak_bf16" "$threads" "$backend" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak = {"fp32": float(sys.argv[2]), "bf16": float(sys.argv[3])}
threads, backend = int(sys.argv[4]), sys.argv[5]
runs = ["tfm_fp32", "torch_fp32", "tfm_bf16", "torch_bf16"]
out = {"peak_gflops": peak, "backend": backend, "threads": threads, "configs": []}
print()
print("| config | run | ms/step | tokens/s | MFU (of its precision's peak) | peak RSS |")
print("|---|---|---|---|---|---|")
for cfg in dict.fromkeys(r["config"] for r in rows):
    rs = [r for r in rows if r["config"] == cfg]
    c = {"config": cfg, "params": rs[0]["params"], "repeats": len(rs)}
    for run in runs:
        ms, tok, rss = (statistics.median(r[run][i] for r in rs) for i in range(3))
        mfu = rs[0]["flops_per_token"] * tok / (peak[run.split("_")[1]] * 1e9)
        c[run] = {"ms_per_step": ms, "tokens_per_s": tok, "mfu": mfu, "peak_rss_mb": rss / 1024}
        print(f"| {cfg} ({rs[0]['params']/1e6:.2f}M) | {run.replace('_', ' ')} | {ms:,.1f} | {tok:,.0f} | "
              f"{100*mfu:.1f}% | {rss/1024:,.0f} MB |")
    # Ratios pair by pair within a repeat (the same minute of a shared machine), then the median.
    ratio = lambda a, b: statistics.median(r[a][0] / r[b][0] for r in rs)
    c["ratios"] = {"torch_fp32 / tfm_fp32": ratio("torch_fp32", "tfm_fp32"),
                   "torch_bf16 / tfm_bf16": ratio("torch_bf16", "tfm_bf16"),
                   "torch_bf16 / tfm_fp32": ratio("torch_bf16", "tfm_fp32"),
                   "tfm_fp32 / tfm_bf16": ratio("tfm_fp32", "tfm_bf16"),
                   "torch_fp32 / torch_bf16": ratio("torch_fp32", "torch_bf16"),
                   "tfm_fp32 RSS / torch_fp32 RSS": statistics.median(r["tfm_fp32"][2] / r["torch_fp32"][2] for r in rs),
                   "tfm_bf16 RSS / torch_fp32 RSS": statistics.median(r["tfm_bf16"][2] / r["torch_fp32"][2] for r in rs)}
    out["configs"].append(c)
print()
print("| config | " + " | ".join(next(iter(out["configs"]))["ratios"]) + " |")
print("|---|" + "---|" * len(next(iter(out["configs"]))["ratios"]))
for c in out["configs"]:
    print(f"| {c['config']} | " + " | ".join(f"{v:.2f}" for v in c["ratios"].values()) + " |")
print()
print(json.dumps(out))
PY
