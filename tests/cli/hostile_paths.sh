#!/usr/bin/env bash
# Every tfm command against hostile names, symlinks, FIFOs and device nodes, all inside one temporary
# directory. Passes when:
#   - paths holding quotes, $(), backticks, ;, |, &, newlines, spaces and a leading dash work as names
#     (exit 0) and never run anything (no PWNED file appears anywhere we look);
#   - a symlink, FIFO, character device or directory where tfm would write a file, and a FIFO or
#     device where it would read one, is refused with exit 2 and a message naming that path, at once
#     (every command runs under `timeout`: a hang is a failure);
#   - the files the symlinks point at, outside the run directories, are unchanged byte for byte.
# Usage: tests/cli/hostile_paths.sh TFM_BINARY   (ctest runs it in the Release and the ASan+UBSan build)
set -uo pipefail
tfm="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d /tmp/tfm_hostile.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# Commands run from here: a payload's relative `touch PWNED` would land in it.
mkdir -p "$work/cwd"
cd "$work/cwd"

failures=0
checks=0
failed_check=-1
fail() {  # counts each command once, however many of its expectations fail
  echo "FAIL: $*"
  [ "$failed_check" -eq "$checks" ] || failures=$((failures + 1))
  failed_check=$checks
}

# run NAME ARGS...: tfm ARGS under a time limit; sets $status and $out (stdout and stderr).
run() {
  local name="$1"
  shift
  out="$(timeout -k 5 60 "$tfm" "$@" </dev/null 2>&1)"
  status=$?
  checks=$((checks + 1))
  [ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "$name: timed out (a hang): tfm $*"
}

# expect_ok NAME ARGS...: exits 0.
expect_ok() {
  local name="$1"
  run "$@"
  [ "$status" -eq 0 ] || fail "$name: exit $status, expected 0: $(tail -3 <<<"$out")"
}

# expect_refused NAME PATH ARGS...: exits 2 and the message names PATH.
expect_refused() {
  local name="$1" path="$2"
  shift 2
  run "$name" "$@"
  [ "$status" -eq 2 ] || fail "$name: exit $status, expected 2: $(tail -3 <<<"$out")"
  [[ "$out" == *"$path"* ]] || fail "$name: the message does not name $path: $(tail -3 <<<"$out")"
  [[ "$out" != *"internal error"* ]] || fail "$name: internal error: $out"
}

# Files outside every run directory that the planted symlinks point at: they must never change.
outside="$work/outside"
mkdir -p "$outside"
for i in 1 2 3 4 5 6 7 8 9; do printf 'precious %s\n' "$i" >"$outside/precious$i"; done
(cd "$outside" && sha256sum precious*) >"$work/outside.sha256"

# --- 1. hostile names: every command works on them and runs nothing ---
nasty="$work/it's \$(touch PWNED) 'x/\`touch PWNED\`;touch PWNED|b&c/new
line/ two  spaces/-dash \"dq\" \\ back"
mkdir -p "$nasty"
cp "$root/tests/data/tiny_shakespeare.txt" "$nasty/corpus \$(touch PWNED).txt"
corpus="$nasty/corpus \$(touch PWNED).txt"
config="$nasty/config's.json"
run_dir="$nasty/run 'it's"
small=(--set train.max_steps=4 --set train.eval_interval=2 --set train.eval_steps=1 --set train.log_interval=2
  --set train.checkpoint_interval=2)
cp "$root/configs/tiny.json" "$config"
expect_ok "train (hostile names)" train --config "$config" --set "data.path=$corpus" --out "$run_dir" "${small[@]}"
[ -f "$run_dir/last.ckpt" ] || fail "train (hostile names): no last.ckpt in the hostile run directory"
expect_ok "train --resume" train --resume "$run_dir" --set train.max_steps=6
expect_ok "eval" eval --run "$run_dir" --batches 1
expect_ok "eval --dump-logits" eval --run "$run_dir" --batches 1 --text "ROMEO" --dump-logits "$nasty/logits 'x'.json"
expect_ok "sample" sample --run "$run_dir" --prompt "ROMEO" --max-new-tokens 4
expect_ok "export safetensors" export --run "$run_dir" --format safetensors --out "$nasty/model \`x\`.safetensors"
expect_ok "export gguf" export --run "$run_dir" --format gguf --out "$nasty/gguf 'out'"
expect_ok "train --init-from" train --config "$config" --set "data.path=$corpus" --out "$nasty/init 'run'" \
  --init-from "$nasty/model \`x\`.safetensors" "${small[@]}"
expect_ok "attention" attention --run "$run_dir" --text "to be" --out "$nasty/attention 'x'"
expect_ok "heads" heads --run "$run_dir" --batches 1 --out "$nasty/heads \$(x)"
expect_ok "info" info --config "$config" --set "data.path=$corpus"
expect_ok "config" config --config "$config" --set "data.path=$corpus"
expect_ok "data prepare" data prepare --config "$config" --set "data.path=$corpus" --rebuild
expect_ok "tokenizer train" tokenizer train --data "$corpus" --vocab-size 260 --out "$nasty/bpe 'x'.json"
expect_ok "gradcheck" gradcheck --config "$config" --set "data.path=$corpus" --directions 1
expect_ok "sweep" sweep --config "$config" --set "data.path=$corpus" --grid model.n_heads=2,4 \
  --out "$nasty/sweep 'x'" "${small[@]}"
expect_ok "bench attention" bench attention --seq-lens 8,16 --d-model 16 --heads 2 --batch 1 --seconds 0.01 \
  --out "$nasty/bench 'x'"
expect_ok "train masked_lm" train --config "$config" --set "data.path=$corpus" --set train.objective=masked_lm \
  --set model.causal=false --out "$nasty/mlm 'x" "${small[@]}"
expect_ok "fill-mask" fill-mask --run "$nasty/mlm 'x" --text "To be[MASK]"
cp "$root/tests/fixtures/eng_fra_head.txt" "$nasty/pairs 'x'.txt"
expect_ok "train seq2seq" train --config "$config" --set "data.path=$nasty/pairs 'x'.txt" --set train.objective=seq2seq \
  --set data.tokenizer=word --out "$nasty/s2s 'x" "${small[@]}"
expect_ok "translate" translate --run "$nasty/s2s 'x" --text "go ." --beam 2
expect_ok "attention seq2seq" attention --run "$nasty/s2s 'x" --text "go ." --target "va !" --out "$nasty/s2s att"

# --- 2. symlinks, FIFOs, devices and directories where tfm writes ---
plant="$work/plant"
mkdir -p "$plant"
mknod "$plant/null" c 1 3 2>/dev/null || fail "mknod: cannot make a device node (not root?)"
mkfifo "$plant/fifo"
mkdir -p "$plant/a directory"
ln -s "$outside/precious1" "$plant/link"
for target in "$plant/link" "$plant/null" "$plant/fifo" "$plant/a directory"; do
  expect_refused "export --out $target" "$target" export --run "$run_dir" --format safetensors --out "$target"
  expect_refused "tokenizer train --out $target" "$target" tokenizer train --data "$corpus" --vocab-size 260 \
    --out "$target"
  expect_refused "eval --dump-logits $target" "$target" eval --run "$run_dir" --batches 1 --text "ROMEO" \
    --dump-logits "$target"
done
[ -c "$plant/null" ] || fail "the device node was replaced"
[ -p "$plant/fifo" ] || fail "the FIFO was replaced"

# A report file of a command's --out directory planted as a symlink (the name each command writes).
plant_dir() {  # plant_dir DIR FILE: DIR with FILE a symlink to precious2
  rm -rf "$1"
  mkdir -p "$1"
  ln -s "$outside/precious2" "$1/$2"
}
ln -s "$outside/precious2" "$plant/model.gguf"
expect_refused "export gguf over a symlink" "$plant/model.gguf" export --run "$run_dir" --format gguf \
  --out "$plant/model.gguf"
plant_dir "$plant/heads" heads.json
expect_refused "heads over a symlink" "heads.json" heads --run "$run_dir" --batches 1 --out "$plant/heads" --no-plot
plant_dir "$plant/attention" attention.json
expect_refused "attention over a symlink" "attention.json" attention --run "$run_dir" --text "to be" \
  --out "$plant/attention" --no-plot
plant_dir "$plant/bench" bench_attention.json
expect_refused "bench over a symlink" "bench_attention.json" bench attention --seq-lens 8,16 --d-model 16 --heads 2 \
  --batch 1 --seconds 0.01 --out "$plant/bench" --no-plot
plant_dir "$plant/sweep" sweep.jsonl
expect_refused "sweep over a symlink" "sweep.jsonl" sweep --config "$config" --set "data.path=$corpus" \
  --grid model.n_heads=2 --out "$plant/sweep" --no-plot "${small[@]}"

# A run whose log, metrics or best checkpoint is a symlink: resuming refuses it before writing.
for name in train.log metrics.jsonl best.ckpt; do
  victim="$work/victim_$name"
  rm -rf "$victim"
  cp -r "$run_dir" "$victim"
  rm -f "$victim/$name"
  ln -s "$outside/precious3" "$victim/$name"
  run "resume with $name a symlink" train --resume "$victim" --set train.max_steps=10
  [ "$status" -eq 2 ] || fail "resume with $name a symlink: exit $status, expected 2: $(tail -3 <<<"$out")"
  [[ "$out" == *"$name"* ]] || fail "resume with $name a symlink: the message does not name it: $out"
done
# A new run in a directory that holds only best.ckpt, or only a log, is refused (it holds a run).
for name in best.ckpt train.log metrics.jsonl; do
  only="$work/only_$name"
  mkdir -p "$only"
  cp "$run_dir/$name" "$only/$name"
  sha="$(sha256sum <"$only/$name")"
  expect_refused "train --out a directory holding only $name" "$only" train --config "$config" \
    --set "data.path=$corpus" --out "$only" "${small[@]}"
  [ "$(sha256sum <"$only/$name")" = "$sha" ] || fail "train --out a directory holding only $name changed it"
done
# No command but training writes a run's own files.
for name in last.ckpt best.ckpt config.json; do
  sha="$(sha256sum <"$run_dir/$name")"
  expect_refused "export over the run's $name" "$name" export --run "$run_dir" --format safetensors \
    --out "$run_dir/$name"
  expect_refused "export over the run's $name through .." "$name" export --run "$run_dir" --format safetensors \
    --out "$run_dir/../$(basename "$run_dir")/$name"
  [ "$(sha256sum <"$run_dir/$name")" = "$sha" ] || fail "export over $name changed it"
done
# The token cache: a symlink planted at the name the cache is written under (with data.cache_dir set,
# the name holds a hash of the corpus's path: the one a first prepare wrote).
cache_dir="$work/cache"
mkdir -p "$cache_dir"
run "data prepare into a cache folder" data prepare --config "$config" --set "data.path=$corpus" \
  --set "data.cache_dir=$cache_dir"
[ "$status" -eq 0 ] || fail "data prepare into a cache folder: exit $status: $out"
caches=("$cache_dir"/*.char.tokens)
[ "${#caches[@]}" -eq 1 ] && [ -f "${caches[0]}" ] || fail "data prepare wrote no cache in $cache_dir"
rm -f "${caches[0]}" "${caches[0]}.checked"
ln -s "$outside/precious4" "${caches[0]}"
run "data prepare over a symlinked cache" data prepare --config "$config" --set "data.path=$corpus" \
  --set "data.cache_dir=$cache_dir" --rebuild
[ "$status" -eq 2 ] || [ "$status" -eq 0 ] || fail "data prepare over a symlinked cache: exit $status: $out"

# --- 3. FIFOs and devices where tfm reads ---
for src in "$plant/fifo" "$plant/null"; do
  expect_refused "train --config $src" "$src" train --config "$src" --out "$work/never"
  expect_refused "info --config $src" "$src" info --config "$src"
  expect_refused "config --config $src" "$src" config --config "$src"
  expect_refused "data.path $src" "$src" data prepare --config "$config" --set "data.path=$src"
  expect_refused "data.tokenizer_path $src" "$src" data prepare --config "$config" --set data.tokenizer=bpe \
    --set "data.tokenizer_path=$src"
  expect_refused "train --init-from $src" "$src" train --config "$config" --set "data.path=$corpus" \
    --out "$work/never" --init-from "$src" "${small[@]}"
  expect_refused "sample --init-from $src" "$src" sample --run "$run_dir" --init-from "$src" --max-new-tokens 2
  expect_refused "tokenizer train --data $src" "$src" tokenizer train --data "$src" --vocab-size 260 \
    --out "$work/never.json"
done
# A run whose checkpoints are FIFOs.
fifo_run="$work/fifo_run"
mkdir -p "$fifo_run"
mkfifo "$fifo_run/last.ckpt" "$fifo_run/best.ckpt"
expect_refused "eval on a FIFO checkpoint" "$fifo_run/best.ckpt" eval --run "$fifo_run" --checkpoint best
expect_refused "eval --checkpoint last on a FIFO" "$fifo_run/last.ckpt" eval --run "$fifo_run" --checkpoint last
expect_refused "resume from a FIFO checkpoint" "$fifo_run/last.ckpt" train --resume "$fifo_run"
# A run list names the FIFO as the run's problem and goes on (it waited on the FIFO for a writer).
echo '{"step": 1, "train_loss": 3.0}' >"$fifo_run/metrics.jsonl"
expect_ok "runs over a run with FIFO checkpoints" runs "$fifo_run"
[[ "$out" == *"$fifo_run/last.ckpt: is a FIFO"* ]] || fail "runs over FIFO checkpoints: not named: $out"
rm "$fifo_run/metrics.jsonl"
[ -e "$work/never" ] && fail "a refused command created $work/never"

# --- nothing ran, nothing outside changed ---
for where in "$work" "$root" /tmp; do
  found="$(find "$where" -maxdepth 8 -name PWNED 2>/dev/null | head -3)"
  [ -z "$found" ] || fail "a payload ran: $found"
done
(cd "$outside" && sha256sum --quiet -c "$work/outside.sha256") || fail "a file outside the runs changed"

echo "hostile_paths: $checks commands run"
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
