#!/usr/bin/env bash
# llama.cpp runs tfm's GGUF exports (docs/llama_cpp.md): real llama.cpp, through node-llama-cpp's prebuilt CPU
# libraries, against tfm on the same token ids.
#   1. Installs node-llama-cpp 3.22.1 and only its linux-x64 CPU prebuilt into a cache outside the
#      repository (once; later runs use the cache and need no network).
#   2. Trains five tiny models (configs/tiny.json-sized, a few hundred steps): `char` (char tokenizer,
#      sinusoidal positions, tied head: the defaults) and `bpe` (byte-level BPE, learned positions,
#      untied head, grouped-query attention), both llama.cpp's gpt2; `llama` (BPE, RoPE, RMSNorm, SwiGLU,
#      no biases, grouped-query attention, untied head: llama.cpp's llama), `qwen3` (char, the same
#      with QK-norm and a tied head: llama.cpp's qwen3) and `gpt2` (GPT-2's own tokenizer, 50,257 ids, on
#      d_model 32: llama.cpp's gpt2 with pre "gpt-2"); and exports each as GGUF in f32, f16 and bf16 (the
#      gpt2 model in f32 only).
#   3. For each file: llama.cpp's next-token probabilities at every position of a few prompts against
#      tfm's (`tfm eval --dump-logits --text`), llama.cpp's greedy continuation of 32 tokens against
#      `tfm sample --temperature 0`, and llama.cpp's tokenization of the prompts against tfm's ids.
#      llama.cpp runs with an f32 KV cache and without flash attention (both round to half precision
#      on the CPU), so that the figures are of the file; the f32 file is also run with llama.cpp's
#      defaults (f16 KV cache, flash attention auto), what a user sees.
# Usage: scripts/dev/check_gguf.sh [TFM_BINARY]  (default: $TFM_BINARY, else build/dev/tfm, build/release/tfm)
#        scripts/dev/check_gguf.sh --install-only   (step 1 alone: scripts/test.sh fetches while it builds)
# Environment: TFM_NODE_LLAMA_CPP   install directory (default ${XDG_CACHE_HOME:-~/.cache}/tfm/node-llama-cpp)
#              TFM_GGUF_KEEP=DIR    keep the runs, exports and reports in DIR
# Exit status: 0 every check within its tolerance, 1 a check failed, 2 a setup error, 77 skipped
# (node/npm missing, or npm cannot reach the registry and nothing is installed yet).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
root=$TFM_ROOT
install_only=0
[[ ${1:-} == --install-only ]] && install_only=1

# ---- 1. node-llama-cpp, CPU only ----
version=3.22.1
home=${TFM_NODE_LLAMA_CPP:-${XDG_CACHE_HOME:-$HOME/.cache}/tfm/node-llama-cpp}
export TFM_NODE_LLAMA_CPP=$home
skip() { echo "check_gguf.sh: SKIPPED: $*"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null ||
  skip "node and npm are not installed (Debian: apt-get install nodejs npm); llama.cpp was not run"
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= 20)) || skip "node $(node --version) is older than node-llama-cpp's minimum, 20; llama.cpp was not run"
installed() {
  [[ -f $home/node_modules/@node-llama-cpp/linux-x64/package.json ]] &&
    node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
      "$home/node_modules/node-llama-cpp/package.json" "$version" 2>/dev/null
}
if ! installed; then
  [[ $(uname -sm) == "Linux x86_64" ]] || { echo "check_gguf.sh: the CPU prebuilt used here is linux-x64's" >&2; exit 2; }
  if ! timeout 60 npm view --fetch-retries=1 --fetch-timeout=20000 "node-llama-cpp@$version" version >/dev/null 2>&1; then
    skip "npm cannot reach its registry ($(npm config get registry 2>/dev/null)) and node-llama-cpp $version is not in $home yet"
  fi
  echo "check_gguf.sh: installing node-llama-cpp $version (CPU prebuilt only) into $home"
  mkdir -p "$home"
  echo '{"name": "tfm-llama-cpp-check", "private": true}' > "$home/package.json"
  # node-llama-cpp lists its 14 prebuilt binaries (CUDA, Vulkan, other systems) as optional
  # dependencies; npm would fetch all that match linux-x64 (CUDA and Vulkan: most of ~725 MB).
  # --omit=optional leaves them out and the CPU package is named as a direct dependency instead.
  # --ignore-scripts: its postinstall looks for binaries and may fetch llama.cpp's source to build
  # one; scripts/dev/llama_cpp.mjs asks getLlama for the prebuilt only (build: "never").
  (cd "$home" && npm install --omit=optional --ignore-scripts --save-exact --no-audit --no-fund --loglevel=error \
    "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version") || { echo "check_gguf.sh: npm install failed" >&2; exit 2; }
  installed || { echo "check_gguf.sh: node-llama-cpp $version is still missing from $home" >&2; exit 2; }
  echo "check_gguf.sh: installed: $(du -sh "$home/node_modules" | cut -f1) in $home/node_modules"
fi
((install_only)) && exit 0
tfm_find_binary "${1:-}"
tfm=$TFM_BIN

# ---- 2. four tiny models, exported ----
if [[ -n ${TFM_GGUF_KEEP:-} ]]; then
  work=$TFM_GGUF_KEEP
  rm -rf "$work" && mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/tfm_check_gguf.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
tfm_keep_gemm_peak_in "$work/cache"
cd "$root"  # the config's data.path is relative to the repository
steps=1000
common=(--config configs/tiny.json --set model.d_model=64 --set model.max_seq_len=64 --set train.seq_len=64
  --set train.max_steps=$steps --set train.eval_interval=$steps --set train.checkpoint_interval=0
  --set train.log_interval=$steps --set train.threads=1)
"$tfm" tokenizer train --data tests/data/tiny_shakespeare.txt --vocab-size 384 --out "$work/bpe.json" > /dev/null
"$tfm" train "${common[@]}" --out "$work/char" > "$work/char.train.log" 2>&1 ||
  { cat "$work/char.train.log"; exit 1; }
"$tfm" train "${common[@]}" --set data.tokenizer=bpe --set "data.tokenizer_path=\"$work/bpe.json\"" \
  --set model.positional_encoding=learned --set model.tie_embeddings=false --set model.n_kv_heads=2 \
  --out "$work/bpe" > "$work/bpe.train.log" 2>&1 || { cat "$work/bpe.train.log"; exit 1; }
# The modern options (llama.cpp's llama, and qwen3 with QK-norm). SwiGLU's d_ff of 2/3 of 4 C keeps the
# feed-forward's parameters those of GELU's 4 C (Shazeer 2020); fewer steps: they learn faster.
modern_steps=400
modern=(--set model.positional_encoding=rope --set model.norm=rmsnorm --set model.activation=swiglu
  --set model.bias=false --set model.d_ff=176 --set train.max_steps=$modern_steps --set train.eval_interval=$modern_steps
  --set train.log_interval=$modern_steps)
"$tfm" train "${common[@]}" "${modern[@]}" --set data.tokenizer=bpe --set "data.tokenizer_path=\"$work/bpe.json\"" \
  --set model.tie_embeddings=false --set model.n_kv_heads=2 --out "$work/llama" > "$work/llama.train.log" 2>&1 ||
  { cat "$work/llama.train.log"; exit 1; }
"$tfm" train "${common[@]}" "${modern[@]}" --set model.qk_norm=true --set model.n_kv_heads=2 \
  --out "$work/qwen3" > "$work/qwen3.train.log" 2>&1 || { cat "$work/qwen3.train.log"; exit 1; }
# GPT-2's tokenizer: a 50257-row embedding on d_model 32, so that llama.cpp's gpt-2 pre-split and merges
# are checked against tfm's on the prompts (and the figures on a model of GPT-2's vocabulary).
# 50 steps of 2 sequences (4.3 s on one thread; of 8, 13 s): its checks are the tokenizer's and the f32
# file's; the element types are checked on the four small-vocabulary models, where a file is 2% of this
# one's.
gpt2_steps=50
"$tfm" train "${common[@]}" --set data.tokenizer=gpt2 --set model.d_model=32 --set train.batch_size=2 \
  --set train.max_steps=$gpt2_steps \
  --set train.eval_interval=$gpt2_steps --set train.log_interval=$gpt2_steps --out "$work/gpt2" \
  > "$work/gpt2.train.log" 2>&1 || { cat "$work/gpt2.train.log"; exit 1; }
# A char vocabulary with the document separator (two documents: the text's halves; the separator is the
# last id, a control token and the file's end of generation): llama.cpp must load it and tokenize text to
# tfm's ids around it. 50 steps: the checks are the tokenizer's and the f32 file's.
mkdir -p "$work/docs"
half=$(($(wc -c < tests/data/tiny_shakespeare.txt) / 2))
head -c "$half" tests/data/tiny_shakespeare.txt > "$work/docs/a.txt"
tail -c +$((half + 1)) tests/data/tiny_shakespeare.txt > "$work/docs/b.txt"
"$tfm" train "${common[@]}" --set "data.path=$work/docs" --set model.d_model=32 \
  --set train.max_steps=$gpt2_steps --set train.eval_interval=$gpt2_steps --set train.log_interval=$gpt2_steps \
  --out "$work/char_sep" > "$work/char_sep.train.log" 2>&1 || { cat "$work/char_sep.train.log"; exit 1; }
runs=(char bpe llama qwen3 gpt2 char_sep)
for run in "${runs[@]}"; do
  dtypes=(f32 f16 bf16)
  [[ $run == gpt2 || $run == char_sep ]] && dtypes=(f32)
  for dtype in "${dtypes[@]}"; do
    "$tfm" export --run "$work/$run" --format gguf --dtype $dtype --out "$work/$run-$dtype.gguf" \
      > "$work/$run-$dtype.export.txt"
  done
done

# ---- 3. llama.cpp against tfm ----
# Prompts of at most 32 tokens, so that 32 more fit in the context of 64. The char model's use only
# characters of its vocabulary; the BPE model's last prompt is there for tokenization beyond ASCII.
char_prompts=("First Citizen:" "MENENIUS:" "You are all resolved" $'All:\nWe know\'t, we know\'t.\n')
bpe_prompts=("${char_prompts[@]}" "Café “naïve” — ¿qué?")
gpt2_prompts=("${bpe_prompts[@]}" "中文 テキスト 👍🏽  it's   x''s" $'\t\tdef f(x):\n\n    return 42')
# plan RUN DTYPE exact|defaults TOLERANCE REFERENCE_TOLERANCE GREEDY_REQUIRED PROMPTS...
# One check: tfm's side now (its probabilities, greedy samples and, in exact mode, its reading of the same
# file with llama.cpp's GELU: `tfm eval --gguf --gelu llama.cpp`), llama.cpp's job added to $work/jobs.jsonl
# (all of them run in one node process: loading llama.cpp costs ~2 s of CPU a process), the comparison
# queued for compare(): llama.cpp's probabilities against tfm's model (TOLERANCE) and against tfm's reading
# of the file (REFERENCE_TOLERANCE, "-" to report only): the first is what a user sees, the second what is
# left once GELU's form is accounted for.
checks=()
plan() {
  local run=$1 dtype=$2 mode=$3 tolerance=$4 ref_tolerance=$5 greedy_required=$6
  shift 6
  local name=$run-$dtype-$mode kv=f32 fa=off
  [[ $mode == defaults ]] && kv=f16 fa=auto
  local args=() i=0 prompt
  for prompt in "$@"; do args+=(--text "$prompt"); done
  if [[ ! -f $work/$run.tfm.json ]]; then
    for prompt in "$@"; do
      "$tfm" sample --run "$work/$run" --checkpoint last --prompt "$prompt" --temperature 0 --max-new-tokens 32 \
        > "$work/$run.sample.$i.txt"
      i=$((i + 1))
    done
    "$tfm" eval --run "$work/$run" --checkpoint last --dump-logits "$work/$run.tfm.json" "${args[@]}" > /dev/null
  fi
  [[ $mode == exact ]] && "$tfm" eval --run "$work/$run" --checkpoint last --dump-logits "$work/$run-$dtype.ref.json" \
    --gguf "$work/$run-$dtype.gguf" --gelu llama.cpp "${args[@]}" > /dev/null
  node -e 'const [tfm, model, kv, fa, out, ...texts] = process.argv.slice(1);
    console.log(JSON.stringify({model, prompts: require(tfm).tokens, greedy: 32, texts, kv_cache: kv,
                                flash_attention: fa, out}))' \
    "$work/$run.tfm.json" "$work/$run-$dtype.gguf" $kv $fa "$work/$name.llama.json" "$@" >> "$work/jobs.jsonl"
  checks+=("$run $dtype $name $tolerance $ref_tolerance $greedy_required")
}

# compare RUN DTYPE NAME TOLERANCE REFERENCE_TOLERANCE GREEDY_REQUIRED: a planned check's verdict, once
# llama.cpp has run.
compare() {
  local run=$1 dtype=$2 name=$3 tolerance=$4 ref_tolerance=$5 greedy_required=$6
  [[ -f $work/$name.llama.json ]] || { echo "$name: llama.cpp gave no output: FAIL"; return 1; }
  node - "$work" "$run" "$dtype" "$name" "$tolerance" "$ref_tolerance" "$greedy_required" <<'JS'
const fs = require("fs");
const [work, run, dtype, name, tolerance, refTolerance, greedyRequired] = process.argv.slice(2);
const read = (file) => JSON.parse(fs.readFileSync(`${work}/${file}`, "utf8"));
const tfm = read(`${run}.tfm.json`), llama = read(`${name}.llama.json`);
const ref = fs.existsSync(`${work}/${run}-${dtype}.ref.json`) && name.endsWith("-exact") ? read(`${run}-${dtype}.ref.json`) : null;
// Max |softmax(logits) - llama.cpp's probabilities| over every position and token; top-token agreement.
function compare(dump) {
  const r = {worst: 0, positions: 0, topSum: 0, agree: 0};
  dump.logits.forEach((seq, s) => seq.forEach((logits, t) => {
    const mx = Math.max(...logits);
    const e = logits.map((l) => Math.exp(l - mx));
    const sum = e.reduce((a, b) => a + b, 0);
    const p = llama.prompts[s].probabilities[t];
    let ours = 0, theirs = 0;
    e.forEach((x, v) => {
      r.worst = Math.max(r.worst, Math.abs(x / sum - p[v]));
      if (x > e[ours]) ours = v;
      if (p[v] > p[theirs]) theirs = v;
    });
    r.positions += 1;
    r.topSum += e[ours] / sum;
    r.agree += ours === theirs ? 1 : 0;
  }));
  return r;
}
const c = compare(tfm), rc = ref ? compare(ref) : null;
let greedyMatch = 0, tokenizeEqual = 0;
const n = tfm.tokens.length, problems = [];
tfm.tokens.forEach((ours, s) => {
  // tfm sample prints the prompt, the continuation and a newline.
  const prompt = llama.tokenized[s].text;
  const expected = fs.readFileSync(`${work}/${run}.sample.${s}.txt`, "utf8").slice(prompt.length, -1);
  const got = llama.prompts[s].greedy_text;
  let same = 0;
  while (same < Math.min(got.length, expected.length) && got[same] === expected[same]) same += 1;
  if (got === expected) greedyMatch += 1;
  else problems.push(`greedy continuation of ${JSON.stringify(prompt)} differs after ${same} characters: ` +
                     `llama.cpp ${JSON.stringify(got)}, tfm sample ${JSON.stringify(expected)}`);
  const ids = llama.tokenized[s].tokens;
  if (JSON.stringify(ids) === JSON.stringify(ours)) tokenizeEqual += 1;
  else problems.push(`llama.cpp tokenizes ${JSON.stringify(prompt)} as [${ids}], tfm as [${ours}]`);
});
const refOk = !rc || refTolerance === "-" || rc.worst <= Number(refTolerance);
const ok = c.worst <= Number(tolerance) && refOk && tokenizeEqual === n && (greedyRequired !== "yes" || greedyMatch === n);
console.log(`${name}: max |p_llama.cpp - p_tfm| ${c.worst.toExponential(2)} (tolerance ${tolerance}) over ` +
            `${c.positions} positions, tfm's top token at p ${(c.topSum / c.positions).toFixed(2)} on average and ` +
            `llama.cpp's the same at ${c.agree}/${c.positions}; greedy 32 tokens equal ${greedyMatch}/${n}` +
            `${greedyRequired === "yes" ? "" : " (reported)"}; tokenization equal ${tokenizeEqual}/${n}: ${ok ? "OK" : "FAIL"}`);
// gpt2's reference runs llama.cpp's GELU; llama and qwen3 have none.
if (rc)
  console.log(`  against tfm's reading of the file${llama.architecture === "gpt2" ? " with llama.cpp's GELU" : ""}: ` +
              `max |dp| ${rc.worst.toExponential(2)}` +
              `${refTolerance === "-" ? " (reported)" : ` (tolerance ${refTolerance})`}`);
for (const p of problems) console.log(`  ${p}`);
fs.appendFileSync(`${work}/summary.jsonl`, JSON.stringify({name, architecture: llama.architecture, max_abs_prob_diff: c.worst, tolerance: Number(tolerance),
  max_abs_prob_diff_vs_file_with_llama_gelu: rc ? rc.worst : null, positions: c.positions,
  mean_top_probability: c.topSum / c.positions, top_token_agree: c.agree, greedy_equal: greedyMatch, greedy_total: n,
  tokenization_equal: tokenizeEqual, llama_cpp: llama.llama_cpp, ok}) + "\n");
process.exit(ok ? 0 : 1);
JS
}

echo "check_gguf.sh: node-llama-cpp $version (llama.cpp $(node -e 'console.log(require(process.argv[1]).tag)' \
  "$home/node_modules/node-llama-cpp/llama/llama.cpp.info.json")) against $tfm"
for run in "${runs[@]}"; do
  case $run in char | qwen3 | char_sep) prompts=("${char_prompts[@]}") ;; gpt2) prompts=("${gpt2_prompts[@]}") ;;
    *) prompts=("${bpe_prompts[@]}") ;; esac
  # gpt2's GELU is llama.cpp's tanh form through a half table (~1e-3 in p); llama and qwen3 have no
  # approximation, so only float rounding may separate llama.cpp from tfm there.
  case $run in llama | qwen3) exact=1e-4 ;; *) exact=5e-3 ;; esac
  # char_sep's greedy continuations are reported only: llama.cpp stops at the separator, tfm sample does not.
  greedy=yes
  [[ $run == char_sep ]] && greedy=no
  plan $run f32 exact $exact 2e-4 $greedy "${prompts[@]}"
  [[ $run == gpt2 || $run == char_sep ]] && continue
  plan $run f32 defaults 1e-2 - no "${prompts[@]}"
  plan $run f16 exact 1e-2 - no "${prompts[@]}"
  plan $run bf16 exact 1e-1 - no "${prompts[@]}"
done
node -e 'const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
  require("fs").writeFileSync(process.argv[2], "[" + lines.join(",") + "]")' "$work/jobs.jsonl" "$work/jobs.json"
status=0
node "$root/scripts/dev/llama_cpp.mjs" --jobs "$work/jobs.json" || { echo "scripts/dev/llama_cpp.mjs failed: FAIL"; status=1; }
# Each run's verdicts, then what `tfm export` read back from its file.
for run in "${runs[@]}"; do
  for c in "${checks[@]}"; do
    # shellcheck disable=SC2086 # the fields of a planned check
    [[ $c == "$run "* ]] && { compare $c || status=1; }
  done
  sed -n 's/^read back: /  tfm export, read back: /p' "$work/$run-f32.export.txt"
done
[[ $status == 0 ]] && echo "check_gguf.sh: OK" || echo "check_gguf.sh: FAILED (files in ${TFM_GGUF_KEEP:-a temporary directory: set TFM_GGUF_KEEP=DIR to keep them})"
exit $status
