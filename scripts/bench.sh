#!/usr/bin/env bash
# Times tfm against the PyTorch reference (../shared/reference/torch_lm.py) on the same configs, the
# same machine and the same threads, alternating the two several times, and prints a table of medians.
#
#   scripts/bench.sh                                   # the two shipped Shakespeare configs
#   scripts/bench.sh configs/shakespeare_char.json     # one config
#
# Environment: TFM_BENCH_REPEATS (alternations, default 3), TFM_BENCH_STEPS_SMALL / _LARGE (steps per
# run for configs under / over 5M parameters; default 60 / 8), TFM_THREADS (default: all cores).
#
# What is measured: ms per training step (forward, backward, clipping, optimizer; no evaluation or
# checkpoint). Both sides use the reference's own statistic, the upper median of every step of a run
# (sorted(times)[n // 2], first steps included), then the median over the repeats.
# tfm runs as it does for users (it picks OpenBLAS's SkylakeX kernels on AVX-512 CPUs); the reference
# runs twice per repeat: as the environment has it, and with OPENBLAS_CORETYPE=SkylakeX, so the kernel
# choice is visible on its own. MFU is against the sgemm peak `tfm bench gemm` measures first.
# Peak RSS comes from /usr/bin/time -v. The last line is one JSON object with every figure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(configs/shakespeare_char.json configs/shakespeare_char_large.json)
repeats="${TFM_BENCH_REPEATS:-3}"
threads="${TFM_THREADS:-$(nproc)}"
reference="$TFM_ROOT/../shared/reference/torch_lm.py"
[ -f "$reference" ] || { echo "bench.sh: $reference not found (shared/ beside the repo)" >&2; exit 2; }

tfm_install time python3-torch python3-numpy
tfm_build "$TFM_ROOT/build/release" -DCMAKE_BUILD_TYPE=Release -DTFM_BUILD_TESTS=OFF
scripts/get_data.sh >/dev/null
tfm="$TFM_ROOT/build/release/tfm"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# tfm as users run it: no inherited kernel override, so it chooses.
run_tfm() { env -u OPENBLAS_CORETYPE -u TFM_REEXEC "$tfm" "$@"; }

echo "tfm bench: $(nproc) cores, $threads threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
run_tfm bench gemm --threads "$threads" --json >"$work/gemm.json"
peak=$(/usr/bin/python3 -c "import json;print(json.load(open('$work/gemm.json'))['peak_gflops'])")
echo "measured sgemm peak: $peak GFLOP/s (n = 1024, $threads threads)"

# Prints "ms_per_step tokens_per_s rss_kb" for one tfm run of config $1 with $2 steps.
bench_ours() {
  local config="$1" steps="$2" out="$work/run_$RANDOM"
  /usr/bin/time -v -o "$work/time.txt" env -u OPENBLAS_CORETYPE -u TFM_REEXEC "$tfm" train --config "$config" \
    --out "$out" --set train.max_steps="$steps" --set train.log_interval=1 --set train.eval_interval="$steps" \
    --set train.eval_steps=1 --set train.checkpoint_interval=0 --set train.threads="$threads" >/dev/null 2>&1
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

# Prints "ms_per_step tokens_per_s rss_kb" for one reference run; $3 = OPENBLAS_CORETYPE or "".
bench_ref() {
  local config="$1" steps="$2" core="$3"
  local envs=()
  [ -n "$core" ] && envs=(OPENBLAS_CORETYPE="$core")
  env "${envs[@]}" /usr/bin/time -v -o "$work/time.txt" /usr/bin/python3 "$reference" --config "$config" \
    --steps "$steps" --threads "$threads" --eval-steps 1 >"$work/ref.json" 2>"$work/ref.err" ||
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
default_core="${OPENBLAS_CORETYPE:-}"
for config in "${configs[@]}"; do
  run_tfm info --config "$config" --json >"$work/info.json"
  read -r params flops < <(/usr/bin/python3 -c "import json;i=json.load(open('$work/info.json'));print(i['parameters'], i['train_flops_per_token'])")
  if [ "$params" -gt 5000000 ]; then steps="${TFM_BENCH_STEPS_LARGE:-8}"; else steps="${TFM_BENCH_STEPS_SMALL:-60}"; fi
  echo "== $config ($params parameters, $steps steps per run, $repeats repeats)"
  for r in $(seq "$repeats"); do
    read -r o_ms o_tok o_rss < <(bench_ours "$config" "$steps")
    read -r d_ms d_tok d_rss < <(bench_ref "$config" "$steps" "$default_core")
    read -r s_ms s_tok s_rss < <(bench_ref "$config" "$steps" SkylakeX)
    printf '  repeat %d: tfm %.1f ms/step | torch (default kernels) %.1f ms/step | torch (SkylakeX) %.1f ms/step\n' \
      "$r" "$o_ms" "$d_ms" "$s_ms"
    echo "{\"config\":\"$config\",\"params\":$params,\"ours_ms\":$o_ms,\"ours_tok\":$o_tok,\"flops_per_token\":$flops,\"ours_rss_kb\":$o_rss,\"ref_ms\":$d_ms,\"ref_tok\":$d_tok,\"ref_rss_kb\":$d_rss,\"ref_skx_ms\":$s_ms,\"ref_skx_tok\":$s_tok,\"ref_skx_rss_kb\":$s_rss}" >>"$summary"
  done
done

/usr/bin/python3 - "$summary" "$peak" "$threads" "${default_core:-default}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak, threads, core = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
med = lambda k, rs: statistics.median(r[k] for r in rs)
print()
print(f"| config | params | tfm ms/step | torch ms/step ({core}) | speed-up | torch ms/step (SkylakeX) | speed-up | tfm tokens/s | MFU | tfm peak RSS | torch peak RSS | RSS ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
out = {"peak_gflops": peak, "threads": threads, "configs": []}
for cfg in dict.fromkeys(r["config"] for r in rows):
    rs = [r for r in rows if r["config"] == cfg]
    o, d, s = med("ours_ms", rs), med("ref_ms", rs), med("ref_skx_ms", rs)
    tok = med("ours_tok", rs)
    mfu = rs[0]["flops_per_token"] * tok / (peak * 1e9)
    orss, drss = med("ours_rss_kb", rs) / 1024, med("ref_rss_kb", rs) / 1024
    print(f"| {cfg} | {rs[0]['params']/1e6:.2f}M | {o:.1f} | {d:.1f} | {d/o:.2f}x | {s:.1f} | {s/o:.2f}x | "
          f"{tok:,.0f} | {100*mfu:.1f}% | {orss:.0f} MB | {drss:.0f} MB | {orss/drss:.2f} |")
    out["configs"].append({"config": cfg, "params": rs[0]["params"], "tfm_ms_per_step": o, "torch_ms_per_step": d,
                           "torch_skylakex_ms_per_step": s, "speedup": d / o, "speedup_vs_torch_skylakex": s / o,
                           "tfm_tokens_per_s": tok, "mfu": mfu, "tfm_peak_rss_mb": orss, "torch_peak_rss_mb": drss,
                           "repeats": len(rs)})
print()
print(json.dumps(out))
PY
