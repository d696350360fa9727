#!/usr/bin/env bash
# Puts tiny Shakespeare (1.1 MB, Karpathy's char-rnn corpus) in data/tinyshakespeare.txt.
# Source, in order: $TFM_DATA_MIRROR/tinyshakespeare.txt (default ../shared/data next to the repo, when
# it exists), else a download with curl or wget. Idempotent: does nothing when the file is present.
#   scripts/get_data.sh
#   TFM_DATA_MIRROR=/mnt/datasets scripts/get_data.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="tinyshakespeare.txt"
dest="$root/data/$name"
url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"

if [ -s "$dest" ]; then
  echo "tfm: $dest is already here"
  exit 0
fi
mkdir -p "$root/data"
mirror="${TFM_DATA_MIRROR:-}"
if [ -z "$mirror" ] && [ -d "$root/../shared/data" ]; then
  mirror="$root/../shared/data"
fi
tmp="$dest.tmp"
trap 'rm -f "$tmp"' EXIT
if [ -n "$mirror" ] && [ -s "$mirror/$name" ]; then
  cp "$mirror/$name" "$tmp"
  echo "tfm: copied $name from $mirror"
else
  [ -n "$mirror" ] && echo "tfm: $mirror/$name not found; downloading"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$tmp" "$url" || true
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$tmp" "$url" || true
  fi
  if [ ! -s "$tmp" ]; then
    echo "tfm: error: could not get $name: no mirror (set TFM_DATA_MIRROR to a directory holding it)" >&2
    echo "     and the download from $url failed (no network, or neither curl nor wget installed)." >&2
    echo "     Put the file at $dest by hand and run again." >&2
    exit 1
  fi
  echo "tfm: downloaded $name"
fi
chmod 644 "$tmp"
mv "$tmp" "$dest"
echo "tfm: $dest ($(wc -c <"$dest") bytes)"
