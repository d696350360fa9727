#!/usr/bin/env bash
# Installs what is missing, builds from scratch and runs every test through ctest.
#   scripts/test.sh            # Release build (-O3 -march=native) + all tests
# Environment: TFM_TEST_JOBS (parallel ctest jobs, default: number of cores).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TFM_ROOT"

tfm_install
build="$TFM_ROOT/build/test"
rm -rf "$build"
echo "tfm: building in $build"
tfm_build "$build" -DCMAKE_BUILD_TYPE=Release -DTFM_WERROR=ON
echo "tfm: running tests"
cd "$build"
ctest --output-on-failure -j "${TFM_TEST_JOBS:-$(nproc)}"
