#!/usr/bin/env bash
# Installs what is missing, checks the formatting (scripts/dev/format.sh --check), builds from scratch with
# Ninja and runs every test through ctest, each test file as one process, twice (the test code compiles
# once, at -O0: docs/testing.md):
#   1. the Release build (-O3 -march=native, warnings as errors), all tests (with scripts/dev/check_gguf.sh:
#      llama.cpp runs tfm's GGUF exports; skipped, saying why, when npm cannot reach its registry), then
#      `cmake --install` into a temporary prefix and examples/ built and run against the installed package,
#      beside step 2;
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build (-Og -g1), compiled while the Release tests
#      run and linking the test code the Release build compiled, its library one translation unit
#      (TFM_LIBRARY_ONE_UNIT: the Release build has checked the layers); the same tests. -Og compiles the
#      instrumented code in half the time of -O1 (the CLI's first batch: 88 -> 35 s of CPU); -g1 keeps
#      the line tables the sanitizers' stack traces need (file:line) without the full debug information.
# Usage: scripts/test.sh
# Environment: TFM_TEST_JOBS (parallel ctest jobs, default: cores), TFM_SANITIZE=0 skips step 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

tfm_install
echo "tfm: formatting (clang-format)"
"$TFM_ROOT/scripts/dev/format.sh" --check
jobs="${TFM_TEST_JOBS:-$(nproc)}"
export OMP_WAIT_POLICY=passive  # ctest runs tests side by side: idle OpenMP threads must not spin

release="$TFM_ROOT/build/test"
asan="$TFM_ROOT/build/asan"
rm -rf "$release" "$asan"
mkdir -p "$TFM_ROOT/build"
asan_pid="" install_pid="" clients_pid=""
# What runs in the background is its own process group, stopped with the script (a failed test too).
trap 'for pid in $asan_pid $install_pid $clients_pid; do kill -- "-$pid" 2>/dev/null || true; done' EXIT
# The real clients (llama.cpp, Chromium, js-tiktoken) are fetched while the Release tree compiles: on a
# new machine Chromium's apt-get and the npm downloads had run inside their checks, each holding a ctest
# slot for most of a minute (the Release tests: 224 -> 198 s, AVX-512 Xeon). A check whose client could
# not be fetched says so and skips when ctest runs it.
clients_log="$TFM_ROOT/build/clients.log"
setsid bash -c 'for check in gguf board tiktoken; do "$1/scripts/dev/check_$check.sh" --install-only & done; wait' \
  _ "$TFM_ROOT" > "$clients_log" 2>&1 &
clients_pid=$!
echo "tfm: Release build in $release"
tfm_build "$release" -DCMAKE_BUILD_TYPE=Release -DTFM_WERROR=ON -DTFM_TESTS_PER_FILE=ON
wait "$clients_pid" || true
grep -h "^check_[a-z]*.sh: \(installed\|SKIPPED\)" "$clients_log" || true
# The sanitizer build compiles beside the Release tests, in a session of its own (setsid), which the
# kernel's autogroups give an equal share of the cores whatever the nice of its processes (nice 10 had
# no effect). Given only the time the Release build and tests left idle, it ended 83 s after them, with
# a core idle meanwhile (AVX-512 Xeon). It links the test code the Release build compiled
# (TFM_TEST_OBJECTS_FROM: the same sources, compiled once) against its own instrumented library, and
# runs its own instrumented tfm.
asan_log="$TFM_ROOT/build/asan.log"
if [ "${TFM_SANITIZE:-1}" != "0" ]; then
  echo "tfm: ASan+UBSan build in $asan, beside the Release tests (its output: $asan_log)"
  setsid bash -c 'source "$1/scripts/common.sh"; shift; tfm_build "$@"' _ "$TFM_ROOT" "$asan" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1" -DTFM_SANITIZE=ON -DTFM_WERROR=ON \
    -DTFM_LIBRARY_ONE_UNIT=ON -DTFM_TEST_OBJECTS_FROM="$release" > "$asan_log" 2>&1 &
  asan_pid=$!
fi
echo "tfm: tests (Release)"
(cd "$release" && ctest --output-on-failure -j "$jobs")
# ctest counts a skipped check as skipped without its reason: say it (scripts/dev/check_*.sh).
grep -h "check_[a-z]*.sh: SKIPPED" "$release/Testing/Temporary/LastTest.log" 2>/dev/null || true
# The install check runs beside what follows (it is mostly compiling examples/); its report comes last.
install_log="$TFM_ROOT/build/install_check.log"
echo "tfm: install into a temporary prefix, build and run examples/ against it (its output: $install_log)"
setsid "$TFM_ROOT/scripts/dev/check_install.sh" "$release" > "$install_log" 2>&1 &
install_pid=$!

if [ -n "$asan_pid" ]; then
  wait "$asan_pid" || { tail -n 60 "$asan_log"; echo "tfm: the ASan+UBSan build failed (all of it: $asan_log)"; exit 1; }
  echo "tfm: tests (ASan+UBSan)"
  # malloc_context_size=1 and max_malloc_fill_size=0 catch the same bugs for less: AddressSanitizer
  # records the stack of every allocation (1 frame instead of 30: the allocator) and fills new memory
  # with a pattern (no fill: it makes no report, MemorySanitizer's job). The whole-model gradient checks
  # allocate a tensor per op: `tfm gradcheck` of eng_fra took 2.12 -> 1.68 s of CPU with 2 frames, this
  # tree's ctest 0.93x (2 A/B pairs; AVX2 EPYC); each distinct stack takes a slot of a 4 MB table
  # at a random page, and 1 frame took a start of tfm from 4,955 to 4,590 page faults. A report still
  # gives the bad access's whole stack; tests that fail run once more with whole allocation and free
  # stacks (malloc_context_size=30).
  # quarantine_size_mb=16: a freed block stays unusable, so that a use after free is caught, until 16 MB
  # more have been freed (256 by default). Tensor storage is recycled by tfm's own pool (engine/memory.cpp,
  # poisoned while it waits there), so what goes through the quarantine is small objects, thousands of
  # frees deep; the smaller quarantine reuses memory that is still mapped and cached: one gradient check of
  # eng_fra took 0.79x the CPU (7 A/B pairs).
  asan_common="detect_leaks=1:abort_on_error=1:strict_string_checks=1:quarantine_size_mb=16"
  export ASAN_OPTIONS="$asan_common:malloc_context_size=1:max_malloc_fill_size=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # use_globals=0: LeakSanitizer's exit scan does not take global variables as roots. It reports every
  # leak it reported before (fewer roots can only leave more blocks unreached) and more: a heap block held
  # only by a global at exit, which tfm does not leave (its static objects are destroyed by then).
  # It no longer reads the sanitizer runtimes' own 12 MB of global data at every exit: the sanitizer CLI
  # tests took 0.87x the CPU (6 A/B pairs; AVX2 EPYC), a start 4,921 -> 3,511 page faults.
  export LSAN_OPTIONS="use_globals=0"
  # One job over the cores: several of these tests wait on a server, a signal or a child's log line, and
  # nothing else runs beside them now (the sanitizer tests: 182 -> 166 s, AVX-512 Xeon).
  if ! (cd "$asan" && ctest --output-on-failure -j "$((jobs + 1))"); then
    echo "tfm: the failed sanitizer tests once more, with every report's allocation and free stacks whole"
    (cd "$asan" && ASAN_OPTIONS="$asan_common:malloc_context_size=30" \
      ctest --rerun-failed --output-on-failure) || true
    exit 1
  fi
fi
cat "$install_log"
wait "$install_pid" || { echo "tfm: the install check failed"; exit 1; }
