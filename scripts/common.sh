# Shared by the scripts: install what is missing (Debian packages), configure and build.
# Sourced, not run. Everything here is idempotent and quick when nothing is missing.

TFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TFM_PACKAGES=(g++ cmake make libopenblas-dev libopenblas-openmp-dev libcli11-dev nlohmann-json3-dev libspdlog-dev catch2
  libopenmpi-dev openmpi-bin time libdnnl-dev)

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
tfm_build() {
  local dir="$1"
  shift
  cmake -S "$TFM_ROOT" -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$(nproc)"
}
