# shellcheck shell=bash disable=SC2034  # TFM_ROOT and TFM_BIN are for the scripts that source this
# Shared by the shell scripts of scripts/ and scripts/dev/: the repository root, installing what is
# missing (Debian packages), building, finding a tfm binary, help and error messages.
# Sourced, not run. Everything here is idempotent and quick when nothing is missing.

TFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where the user ran the script: the scripts work from TFM_ROOT (the configs name their data from there),
# but a path the user gives is relative to where they are (tfm_user_path).
TFM_CALLER_DIR="$PWD"
TFM_PACKAGES=(g++ cmake make ninja-build libopenblas-dev libopenblas-openmp-dev libcli11-dev nlohmann-json3-dev libspdlog-dev catch2
  libopenmpi-dev openmpi-bin time libdnnl-dev libxxhash-dev zlib1g-dev libzstd-dev
  libcpp-httplib-dev libjs-chart.js pkgconf)

# tfm_fail MESSAGE...: the calling script's name and MESSAGE on stderr, then exit 2 (bad input or setup).
tfm_fail() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

# tfm_value OPTION [VALUE...]: in an option loop, before taking "$2": exits 2 unless OPTION has a value.
tfm_value() {
  [ $# -ge 2 ] || tfm_fail "$1 needs a value (--help lists the options)"
}

# tfm_user_path PATH: PATH as the user meant it, relative to where they ran the script (TFM_CALLER_DIR).
tfm_user_path() {
  case "$1" in
    /*) echo "$1" ;;
    *) if [ "$TFM_CALLER_DIR" = "$TFM_ROOT" ]; then echo "$1"; else echo "$TFM_CALLER_DIR/$1"; fi ;;
  esac
}

# tfm_user_config PATH: a config the user named: a file where they ran the script, else the repository's
# own (configs/tiny.json from anywhere).
tfm_user_config() {
  local mine
  mine="$(tfm_user_path "$1")"
  if [ -f "$mine" ]; then echo "$mine"; else echo "$1"; fi
}

# tfm_usage: prints the calling script's help, the comment block at its top.
tfm_usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
}

# tfm_experiment_arg ARGS...: the arguments every experiment script (speedrun.sh, ablate.sh) takes, for
# the default branch of its option loop: CONFIG (sets the caller's `config`), --threads N (sets its
# `threads`), -h/--help (prints the help and exits 0); any other option exits 2. Sets TFM_SHIFT to the
# number of arguments it used. CONFIG is taken where the user is (tfm_user_config).
tfm_experiment_arg() {
  case "$1" in
    --threads)
      tfm_value "$@"
      threads="$2" TFM_SHIFT=2
      ;;
    -h | --help) tfm_usage; exit 0 ;;
    -*) tfm_fail "unknown option $1 (--help lists them)" ;;
    *) config="$(tfm_user_config "$1")" TFM_SHIFT=1 ;;
  esac
}

# tfm_experiment_prepare: after an experiment script's option loop: exits 2 unless its `config` is a
# file, then tfm_prepare; sets the caller's `tfm` (the binary) and `py` (Debian's python3, with torch).
tfm_experiment_prepare() {
  tfm_require_config "$config"
  tfm_prepare
  tfm="$TFM_BIN" py=/usr/bin/python3
}

# tfm_require_config FILE: exits 2 naming FILE unless it is a file.
tfm_require_config() {
  [ -f "$1" ] || tfm_fail "$1: no such config file"
}

# tfm_install [extra packages...]: apt-get installs whatever of the packages is not installed yet.
tfm_install() {
  local missing=()
  local pkg
  for pkg in "${TFM_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "tfm: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# tfm_build DIR [cmake options...]: configures (Release unless told otherwise) and builds in DIR.
# A new tree uses Ninja: Make builds a target's objects only after the targets it links are built, so
# the layers compiled one after another with a core idle; Ninja compiles every object as soon as a core
# is free (the Release build with tests: 223 -> 146 s on 2 cores). A tree already configured keeps its
# generator.
tfm_build() {
  local dir="$1"
  shift
  local generator=()
  [ -f "$dir/CMakeCache.txt" ] || ! command -v ninja >/dev/null || generator=(-G Ninja)
  cmake "${generator[@]}" -S "$TFM_ROOT" -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$(nproc)"
}

# tfm_prepare [extra packages...]: what a script that trains needs. Installs what is missing, builds
# build/release (no tests; its progress on stderr, so stdout keeps only the script's results) unless
# TFM_BINARY names a binary to use, and checks the corpora in data/. Sets TFM_BIN.
tfm_prepare() {
  tfm_install "$@"
  if [ -n "${TFM_BINARY:-}" ]; then
    tfm_find_binary "$TFM_BINARY"
  else
    tfm_build "$TFM_ROOT/build/release" -DCMAKE_BUILD_TYPE=Release -DTFM_BUILD_TESTS=OFF >&2
    TFM_BIN="$TFM_ROOT/build/release/tfm"
  fi
  "$TFM_ROOT/scripts/get_data.sh" >&2
}

# tfm_find_binary [PATH]: sets TFM_BIN to PATH (absolute), else to $TFM_BINARY, else to the first tfm
# built in build/dev, build/release, build/test or build; exits 2 when there is none.
tfm_find_binary() {
  local given="${1:-${TFM_BINARY:-}}" candidate=""
  if [ -n "$given" ]; then
    candidate="$given"
  else
    for candidate in "$TFM_ROOT"/build/{dev,release,test}/tfm "$TFM_ROOT/build/tfm"; do
      [ -x "$candidate" ] && break
    done
  fi
  if [ ! -f "$candidate" ] || [ ! -x "$candidate" ]; then
    tfm_fail "no tfm binary${given:+ at $given} (build one, or give its path)"
  fi
  TFM_BIN="$(cd "$(dirname "$candidate")" && pwd)/$(basename "$candidate")"
}

# tfm_keep_gemm_peak_in DIR: the tfm runs a check starts keep the GEMM peak they time (MFU's, in
# ${XDG_CACHE_HOME:-~/.cache}/tfm) in DIR, not in the user's cache: a check runs beside a build and other
# tests, and a peak timed there would stand for this machine's in every later run. Call it once the
# check's own caches (npm's) are found.
tfm_keep_gemm_peak_in() {
  export XDG_CACHE_HOME="$1"
}

# tfm_npm_check_package CHECK PACKAGE VERSION DIR: for a check by a real client (scripts/dev/check_*.sh):
# npm's PACKAGE@VERSION installed into DIR, a cache outside the repository, unless it is there already.
# Exits 77, a skip saying why as "CHECK: SKIPPED: ...", when node/npm are missing or npm cannot reach its
# registry and nothing is installed yet; exits 2 when the install fails.
tfm_npm_check_package() {
  local check=$1 package=$2 version=$3 dir=$4
  command -v node >/dev/null && command -v npm >/dev/null || {
    echo "$check: SKIPPED: node and npm are not installed (Debian: apt-get install nodejs npm)"
    exit 77
  }
  local manifest="$dir/node_modules/$package/package.json"
  local installed='process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)'
  node -e "$installed" "$manifest" "$version" 2>/dev/null && return 0
  if ! timeout 60 npm view --fetch-retries=1 --fetch-timeout=20000 "$package@$version" version >/dev/null 2>&1; then
    echo "$check: SKIPPED: npm cannot reach its registry ($(npm config get registry 2>/dev/null)) and" \
      "$package $version is not in $dir yet"
    exit 77
  fi
  echo "$check: installing $package $version into $dir"
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name": "tfm-check", "private": true}' >"$dir/package.json"
  (cd "$dir" && npm install --ignore-scripts --save-exact --no-audit --no-fund --loglevel=error \
    "$package@$version") || { echo "$check: npm install failed" >&2; exit 2; }
  node -e "$installed" "$manifest" "$version" 2>/dev/null ||
    { echo "$check: $package $version is still missing from $dir" >&2; exit 2; }
}
