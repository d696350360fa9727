#!/usr/bin/env bash
# Checks the corpora that ship in data/ (data/README.md: sources and licences) and restores a missing
# or damaged one: tiny Shakespeare (1.1 MB, Karpathy's char-rnn corpus) for the language models and
# eng-fra.txt (5,000 English-French Tatoeba pairs, CC-BY 2.0 FR, attribution on every line) for
# translation. A clone has both, so this normally only checks.
# Source of a restored file, in order: $TFM_DATA_MIRROR/<name> (a directory holding the same file
# names), else a download with curl or wget (tiny Shakespeare only: eng-fra.txt has no single public URL;
# `git checkout -- data/eng-fra.txt` restores it from the repository).
#   scripts/get_data.sh
#   TFM_DATA_MIRROR=/mnt/datasets scripts/get_data.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
root=$TFM_ROOT
mkdir -p "$root/data"
mirror="${TFM_DATA_MIRROR:-}"

# fetch NAME SHA256 URL: data/NAME as it should be, else from the mirror or URL (when given).
fetch() {
  local name="$1" sum="$2" url="$3"
  local dest="$root/data/$name"
  if [ -s "$dest" ] && echo "$sum  $dest" | sha256sum -c --quiet - >/dev/null 2>&1; then
    echo "tfm: $dest is here ($(wc -c <"$dest") bytes, checksum OK)"
    return 0
  fi
  [ -e "$dest" ] && echo "tfm: $dest differs from the shipped file (SHA-256); restoring it" >&2
  local tmp="$dest.tmp"
  trap 'rm -f "$tmp"' RETURN
  if [ -n "$mirror" ] && [ -s "$mirror/$name" ]; then
    cp "$mirror/$name" "$tmp"
    echo "tfm: copied $name from $mirror"
  elif [ -n "$url" ]; then
    if command -v curl >/dev/null 2>&1; then
      curl -fsSL --retry 3 -o "$tmp" "$url" || true
    elif command -v wget >/dev/null 2>&1; then
      wget -q -O "$tmp" "$url" || true
    fi
  fi
  if [ ! -s "$tmp" ] || ! echo "$sum  $tmp" | sha256sum -c --quiet - >/dev/null 2>&1; then
    echo "tfm: error: could not restore data/$name: try \`git checkout -- data/$name\` (it ships with the" \
      "repository), or set TFM_DATA_MIRROR to a directory holding it${url:+, or download $url}" >&2
    return 1
  fi
  chmod 644 "$tmp"
  mv "$tmp" "$dest"
  echo "tfm: $dest ($(wc -c <"$dest") bytes)"
}

fetch tinyshakespeare.txt 86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed \
  "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
fetch eng-fra.txt d952b56a181da5270b7bb4ded3f3bbe61e67a9b1de0e0fbc1d46438c71fb55a7 ""
