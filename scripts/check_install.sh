#!/usr/bin/env bash
# Installs a built tree into a temporary prefix and builds and runs examples/ against the installed
# package (find_package(tfm), tfm::tfm), as another project would. Called by scripts/test.sh.
#   scripts/check_install.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:?usage: check_install.sh BUILD_DIR}" && pwd)"
work="$(mktemp -d /tmp/tfm_install.XXXXXX)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for ex in train_small generate; do
  cmake -S "$root/examples/$ex" -B "$work/$ex" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/$ex" -j "$(nproc)" >/dev/null
done
data="$root/tests/data/tiny_shakespeare.txt"
echo "tfm: examples/train_small against the installed package"
"$work/train_small/train_small" "$data"
echo "tfm: examples/generate on a run trained by the installed tfm"
(cd "$root" && "$prefix/bin/tfm" train --config configs/tiny.json --out "$work/run" --set train.max_steps=30 >/dev/null)
"$work/generate/generate" "$work/run" "First Citizen:"
echo "tfm: install check passed"
