#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for SECONDS (default 60).
#   scripts/dev/fuzz.sh            # every target, 60 s each
#   scripts/dev/fuzz.sh 600 config # one target, 10 minutes
# Seeds come from tests/fuzz/corpus/<target>/ (new interesting inputs are added there: commit the
# useful ones); crashes are written to build/fuzz/crashes/<target>/ – copy them into
# tests/fuzz/regressions/<target>/ once fixed, so the test suite replays them forever.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TFM_ROOT"

seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config utf8 safetensors checkpoint bpe gguf)

tfm_install clang libclang-rt-14-dev libomp-14-dev
build="$TFM_ROOT/build/fuzz"
CXX=clang++ tfm_build "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFM_FUZZ=ON -DTFM_BUILD_TESTS=OFF

status=0
for target in "${targets[@]}"; do
  corpus="$TFM_ROOT/tests/fuzz/corpus/$target"
  crashes="$build/crashes/$target"
  work="$build/corpus/$target"
  mkdir -p "$corpus" "$crashes" "$work"
  echo "tfm: fuzzing $target for ${seconds}s"
  log="$build/$target.log"
  if ! "$build/fuzz_$target" "$work" "$corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
      -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1; then
    echo "tfm: $target FOUND A CRASH: see $log and $crashes/"
    status=1
  fi
  runs=$(grep -Eo "stat::number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$" || echo "?")
  echo "tfm: $target: $runs executions, $(ls "$crashes" | wc -l) crash file(s)"
done
exit $status
