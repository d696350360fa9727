#!/usr/bin/env bash
# The token cache's figures (docs/data.md) on generated corpora: for each size, the time to prepare the
# cache (char, byte, BPE 1k and 8k), the time a cached start takes to open and check it, and the peak
# RSS of 20 training steps against the same run on tiny Shakespeare; and BPE training and
# single-thread encoding throughput on a 10 MB sample for vocabularies 1k and 8k.
#
#   scripts/dev/bench_data.sh                          # 100 MB and 1000 MB corpora
#   TFM_BENCH_SIZES="100" scripts/dev/bench_data.sh    # sizes in MB
#   TFM_BENCH_DIR=/scratch scripts/dev/bench_data.sh   # where corpora and caches go (default: mktemp -d)
#   TFM_BENCH_BEFORE=/path/to/old/tfm scripts/dev/bench_data.sh   # also train with a binary from before
#                                                  # the cache, on sizes up to TFM_BENCH_BEFORE_MAX_MB (100)
#   TFM_BINARY=/path/to/tfm scripts/dev/bench_data.sh  # that binary instead of building build/release
#
# Corpora (scripts/dev/gen_corpus.py): lines of tiny Shakespeare drawn at random, a third of them replaced
# by random words of it, so no file is one text repeated and BPE sees a real vocabulary. A size needs
# about 5.5x its bytes of free disk at its peak (the text, a 2-byte id per character, the BPE caches);
# each cache is removed once measured. Prints a Markdown table; the raw output is in DIR/bench.log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TFM_ROOT"

[ "${1:-}" = "--help" ] && { tfm_usage; exit 0; }
tfm_prepare
tfm="$TFM_BIN"
sizes="${TFM_BENCH_SIZES:-100 1000}"
work="${TFM_BENCH_DIR:-$(mktemp -d)}"
mkdir -p "$work"
[ -n "${TFM_BENCH_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
log="$work/bench.log"
: >"$log"
need_mb=0
for s in $sizes; do need_mb=$(( s * 11 / 2 > need_mb ? s * 11 / 2 : need_mb )); done
free_mb=$(df -Pm "$work" | awk 'NR == 2 { print $4 }')
if [ "$free_mb" -lt "$need_mb" ]; then
  echo "bench_data.sh: $work has $free_mb MB free, the largest size needs ~$need_mb MB (set TFM_BENCH_DIR or TFM_BENCH_SIZES)" >&2
  exit 2
fi

config=configs/shakespeare_char.json
train_args=(--set train.max_steps=20 --set train.eval_interval=20 --set train.eval_steps=2 --set train.log_interval=10
            --set train.checkpoint_interval=1000)
# run NAME CMD...: runs CMD under /usr/bin/time, its output into the log; sets $out, $wall, $rss_mb.
run() {
  local name="$1"
  shift
  echo "### $name: $*" >>"$log"
  out="$(/usr/bin/time -f 'TIME %e %M' "$@" 2>&1)"
  echo "$out" >>"$log"
  wall=$(echo "$out" | awk '/^TIME/ { print $2 }')
  rss_mb=$(echo "$out" | awk '/^TIME/ { printf "%.0f", $3 / 1024 }')
}
field() { echo "$out" | sed -n "s/.*$1.*/\\1/p" | head -1; }

# BPE tokenizers and their throughput, on a 10 MB sample of a corpus of their own.
python3 scripts/dev/gen_corpus.py data/tinyshakespeare.txt 10 "$work/sample.txt" --seed 99
bpe_rows=""
for v in 1024 8192; do
  run "bpe train $v" "$tfm" tokenizer train --data "$work/sample.txt" --vocab-size "$v" --out "$work/bpe$v.json"
  train_s=$(field 'training \([0-9.]*\) s'); enc_s=$(field 'encoding \([0-9.]*\) s')
  bpe_rows+="| BPE vocabulary $v, 10 MB sample | training $(awk -v s="$train_s" 'BEGIN { printf "%.2f", 10 / s }') MB/s ($train_s s) | encoding $(awk -v s="$enc_s" 'BEGIN { printf "%.1f", 10 / s }') MB/s on 1 thread ($enc_s s) |"$'\n'
done

# The model's own footprint: the same training on tiny Shakespeare (1.1 MB).
run "train tiny" "$tfm" train --config "$config" "${train_args[@]}" --out "$work/run_tiny"
base_rss=$rss_mb

rows=""
before_rows=""
for s in $sizes; do
  corpus="$work/corpus_${s}mb.txt"
  python3 scripts/dev/gen_corpus.py data/tinyshakespeare.txt "$s" "$corpus" --seed "$s"
  cache="$work/cache"
  for tok in char byte bpe1024 bpe8192; do
    sets=(--set "data.path=$corpus" --set "data.cache_dir=$cache")
    case $tok in
      bpe*) sets+=(--set data.tokenizer=bpe --set "data.tokenizer_path=$work/$tok.json") ;;
      *) sets+=(--set "data.tokenizer=$tok") ;;
    esac
    run "prepare $s MB $tok" "$tfm" data prepare --config "$config" "${sets[@]}" --rebuild
    prep_s=$(field 'tokenized in \([0-9.]*\) s'); prep_rate=$(field '(\([0-9.]*\) MB\/s of text)')
    prep_rss=$rss_mb; bpt=$(field ': \([0-9.]*\) bytes\/token')
    sleep 1.1  # a cache is stamped as checked only once it is a second old (token_cache.h)
    run "first open $s MB $tok" "$tfm" data prepare --config "$config" "${sets[@]}"
    first_s=$(field 'checked in \([0-9.]*\) s')
    run "open $s MB $tok" "$tfm" data prepare --config "$config" "${sets[@]}"
    open_s=$(field 'checked in \([0-9.]*\) s')
    extra="| |"
    if [ "$tok" = char ]; then
      run "train $s MB" "$tfm" train --config "$config" "${train_args[@]}" "${sets[@]}" --out "$work/run_$s"
      extra="| $rss_mb MB ($(( rss_mb - base_rss )) MB over the same run on tiny Shakespeare: $base_rss MB) | $wall s |"
      if [ -n "${TFM_BENCH_BEFORE:-}" ] && [ "$s" -le "${TFM_BENCH_BEFORE_MAX_MB:-100}" ]; then
        run "before: train $s MB" "$TFM_BENCH_BEFORE" train --config "$config" "${train_args[@]}" --set "data.path=$corpus" \
          --out "$work/run_before_$s"
        before_rows+="| $s MB | $rss_mb MB | $wall s |"$'\n'
      fi
    fi
    rows+="| $s MB | $tok | $bpt | $prep_s s ($prep_rate MB/s), peak RSS $prep_rss MB | $open_s s (first: $first_s s) $extra"$'\n'
    rm -rf "$cache"
  done
  rm -f "$corpus"
done

echo
echo "| corpus | tokenizer | bytes/token | prepare (tfm data prepare --rebuild) | cached start: open + check (first start after prepare: ids hashed in full) | peak RSS, 20 steps of $config | wall, 20 steps |"
echo "|---|---|---|---|---|---|---|"
printf "%s" "$rows"
if [ -n "$before_rows" ]; then
  echo
  echo "| corpus | $TFM_BENCH_BEFORE (tokenizes at every start): peak RSS, 20 steps | wall, 20 steps |"
  echo "|---|---|---|"
  printf "%s" "$before_rows"
fi
echo
echo "| BPE | training | encoding |"
echo "|---|---|---|"
printf "%s" "$bpe_rows"
echo
echo "machine: $(nproc) cores; raw output: $log"
