#!/usr/bin/env bash
# Installs a built tree into a temporary prefix and builds and runs examples/ against the installed
# package (find_package(tfm), tfm::tfm), as another project would, and a program of its own that must find
# the prefix's files (GPT-2's tokenizer, the MPI plugin) rather than the source tree's. Called by
# scripts/test.sh.
#   scripts/dev/check_install.sh BUILD_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
root=$TFM_ROOT
build="$(cd "${1:?usage: check_install.sh BUILD_DIR}" && pwd)"
work="$(mktemp -d /tmp/tfm_install.XXXXXX)"
trap 'rm -rf "$work"' EXIT
tfm_keep_gemm_peak_in "$work/cache"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
# One configure for the four examples (examples/CMakeLists.txt): finding tfm's dependencies (OpenMP,
# spdlog, ...) is most of a configure.
cmake -S "$root/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/examples" -j "$(nproc)" >/dev/null
for ex in engine train_small generate seq2seq; do ln -s "$work/examples/$ex" "$work/$ex"; done
data="$root/tests/data/tiny_shakespeare.txt"
echo "tfm: examples/engine against the installed package"
"$work/engine/engine"
echo "tfm: examples/train_small against the installed package"
"$work/train_small/train_small" "$data"
echo "tfm: examples/seq2seq (docs/seq2seq.md's code) against the installed package"
(cd "$root" && "$work/seq2seq/seq2seq")
echo "tfm: examples/generate on a run trained by the installed tfm"
(cd "$root" && "$prefix/bin/tfm" train --config configs/tiny.json --out "$work/run" --set train.max_steps=30 >/dev/null)
"$work/generate/generate" "$work/run" "First Citizen:"
echo "tfm: the installed tfm, run outside the repository, draws its figures itself (SVG, no Python)"
(cd "$work" && "$prefix/bin/tfm" attention --run "$work/run" --text "First Citizen" --out "$work/att" >/dev/null)
[ -s "$work/att/attention_layer0.svg" ] || { echo "tfm: error: tfm attention drew no attention_layer0.svg" >&2; exit 1; }
[ -s "$work/run/loss.svg" ] || { echo "tfm: error: tfm train drew no loss.svg" >&2; exit 1; }
echo "tfm: the installed tfm finds GPT-2's tokenizer files and the board's page in share/tfm"
ids=$(cd "$work" && "$prefix/bin/tfm" tokenizer encode --config "$root/configs/tiny.json" --set data.tokenizer=gpt2 \
  --text "Hello world")
[ "$ids" = "[15496,995]" ] || { echo "tfm: error: the installed tfm encoded 'Hello world' as $ids" >&2; exit 1; }
[ -f "$prefix/share/tfm/board/index.html" ] || { echo "tfm: error: the board's page was not installed" >&2; exit 1; }
echo "tfm: the installed tfm board starts its server (tfm-board) and serves its page and the runs"
# The log exists before the loop reads it: the background job opens it when it starts, maybe after the
# first read, and a failed read (sed's status) would end this script under set -e.
: > "$work/board.log"
"$prefix/bin/tfm" board --runs "$work" --port 0 > "$work/board.log" 2>&1 &
board_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's|^tfm board: http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$work/board.log")
  [ -n "$port" ] || ! kill -0 "$board_pid" 2>/dev/null && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/board.log"; echo "tfm: error: the installed tfm board did not start" >&2; exit 1; }
http_get() {  # PATH: the response of the board to GET PATH, through bash's /dev/tcp
  exec 3<> "/dev/tcp/127.0.0.1/$port"
  printf 'GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}
http_get / | grep -q "<title>" || { echo "tfm: error: the installed board did not serve its page" >&2; exit 1; }
http_get /api/runs | grep -q "\"name\":\"$(basename "$work")/run\"" || { echo "tfm: error: the installed board did not list $work/run" >&2; exit 1; }
kill "$board_pid"
wait "$board_pid" || true
if command -v mpirun >/dev/null && [ -e "$build/libtfm_mpi.so" ]; then
  echo "tfm: the installed tfm, started by mpirun, loads its MPI plugin from lib/tfm and trains on 2 ranks"
  (cd "$root" && mpirun --oversubscribe --allow-run-as-root -np 2 "$prefix/bin/tfm" train --config configs/tiny.json \
    --out "$work/mpi_run" --set train.max_steps=2 > "$work/mpi.log" 2>&1) || { cat "$work/mpi.log"; exit 1; }
  grep -q "mpi: 2 ranks" "$work/mpi_run/train.log" ||
    { echo "tfm: error: the installed tfm under mpirun -np 2 did not train on 2 ranks" >&2; exit 1; }
fi
echo "tfm: a program of the user's own, outside PREFIX/bin, finds the files of the prefix it was built against"
# Not the source tree's: the library learns the package's prefix from find_package(tfm)
# (tfm_package_prefix, cmake/tfmConfig.cmake.in), wherever the program and the source tree are.
mkdir -p "$work/user"
cat > "$work/user/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(tfm_user LANGUAGES CXX)
find_package(tfm 0.1 REQUIRED)
add_executable(user main.cpp)
target_link_libraries(user PRIVATE tfm::tfm)
# The same through a static library of the user's that links tfm PRIVATE: the program links tfm only
# through it.
add_library(userlib STATIC userlib.cpp)
target_link_libraries(userlib PRIVATE tfm::tfm)
add_executable(user_via_lib user_via_lib.cpp)
target_link_libraries(user_via_lib PRIVATE userlib)
EOF
cat > "$work/user/userlib.cpp" <<'EOF'
#include <string>

#include "tfm/data/tokenizer.h"

std::string gpt2_files() { return tfm::Gpt2Bpe::gpt2_directory(); }
EOF
cat > "$work/user/user_via_lib.cpp" <<'EOF'
#include <cstdio>
#include <string>

std::string gpt2_files();

int main() { std::printf("%s\n", gpt2_files().c_str()); }
EOF
cat > "$work/user/main.cpp" <<'EOF'
// user: where GPT-2's files are, then the ids of "Hello world"; user mpi: this process under mpirun.
#include <cstdio>
#include <cstring>

#include "tfm/data/tokenizer.h"
#include "tfm/training/distributed.h"

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "mpi") == 0) {
      tfm::dist::init(&argc, &argv);
      std::printf("%s\n", tfm::dist::describe().c_str());
      tfm::dist::finalize();
      return 0;
    }
    std::printf("%s\n", tfm::Gpt2Bpe::gpt2_directory().c_str());
    for (const int id : tfm::Tokenizer::load_gpt2("").encode("Hello world", "text")) std::printf("%d\n", id);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "user: %s\n", e.what());
    return 1;
  }
}
EOF
cmake -S "$work/user" -B "$work/user/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/user/build" >/dev/null
user_out=$(cd "$work" && "$work/user/build/user")
expected="$prefix/share/tfm/tokenizers/gpt2
15496
995"
[ "$user_out" = "$expected" ] ||
  { printf 'tfm: error: a program linking the installed tfm printed\n%s\ninstead of\n%s\n' "$user_out" "$expected" >&2; exit 1; }
via_lib_out=$(cd "$work" && "$work/user/build/user_via_lib")
[ "$via_lib_out" = "$prefix/share/tfm/tokenizers/gpt2" ] ||
  { echo "tfm: error: a program linking tfm through a static library found GPT-2's files in $via_lib_out" >&2; exit 1; }
if command -v mpirun >/dev/null && [ -e "$build/libtfm_mpi.so" ]; then
  echo "tfm: that program, started by mpirun, loads the MPI plugin from the package's lib/tfm"
  (cd "$work" && mpirun --oversubscribe --allow-run-as-root -np 2 "$work/user/build/user" mpi > "$work/user_mpi.log" 2>&1) ||
    { cat "$work/user_mpi.log"; exit 1; }
  for rank in 0 1; do
    grep -qx "rank $rank of 2 (MPI)" "$work/user_mpi.log" ||
      { cat "$work/user_mpi.log"; echo "tfm: error: rank $rank of the user's program did not start on MPI" >&2; exit 1; }
  done
fi
for dev in "$root"/scripts/dev/*; do  # developers' tools are not part of the product
  installed="$prefix/share/tfm/scripts/$(basename "$dev")"
  [ ! -e "$installed" ] || { echo "tfm: error: $installed was installed: scripts/dev/ is not for users" >&2; exit 1; }
done
# The user's scripts run as they do in the source tree, by their shebang (share/tfm/scripts/torch_lm.py ...).
[ -x "$prefix/share/tfm/scripts/torch_lm.py" ] ||
  { echo "tfm: error: share/tfm/scripts/torch_lm.py was installed without its execute permission" >&2; exit 1; }
echo "tfm: install check passed"
