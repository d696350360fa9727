#!/usr/bin/env bash
# Puts the corpora in data/: tiny Shakespeare (1.1 MB, Karpathy's char-rnn corpus) for the language
# models and eng-fra.txt (5,000 English-French Tatoeba pairs, CC-BY 2.0 FR, attribution on every line)
# for translation.
# Source, in order: $TFM_DATA_MIRROR/<name> (default ../shared/data next to the repo, when it exists),
# else a download with curl or wget (tiny Shakespeare only: eng-fra.txt has no single public URL).
# Idempotent: does nothing for a file already present.
#   scripts/get_data.sh
#   TFM_DATA_MIRROR=/mnt/datasets scripts/get_data.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$root/data"
mirror="${TFM_DATA_MIRROR:-}"
if [ -z "$mirror" ] && [ -d "$root/../shared/data" ]; then
  mirror="$root/../shared/data"
fi

# fetch NAME URL: data/NAME from the mirror, else from URL (when given).
fetch() {
  local name="$1" url="$2"
  local dest="$root/data/$name"
  if [ -s "$dest" ]; then
    echo "tfm: $dest is already here"
    return 0
  fi
  local tmp="$dest.tmp"
  trap 'rm -f "$tmp"' RETURN
  if [ -n "$mirror" ] && [ -s "$mirror/$name" ]; then
    cp "$mirror/$name" "$tmp"
    echo "tfm: copied $name from $mirror"
  else
    [ -n "$mirror" ] && echo "tfm: $mirror/$name not found${url:+; downloading}"
    if [ -n "$url" ]; then
      if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 -o "$tmp" "$url" || true
      elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$tmp" "$url" || true
      fi
    fi
    if [ ! -s "$tmp" ]; then
      echo "tfm: error: could not get $name: no mirror (set TFM_DATA_MIRROR to a directory holding it)" >&2
      [ -n "$url" ] && echo "     and the download from $url failed (no network, or neither curl nor wget installed)." >&2
      echo "     Put the file at $dest by hand and run again." >&2
      return 1
    fi
    echo "tfm: downloaded $name"
  fi
  chmod 644 "$tmp"
  mv "$tmp" "$dest"
  echo "tfm: $dest ($(wc -c <"$dest") bytes)"
}

fetch tinyshakespeare.txt "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
# The translation configs (configs/eng_fra*.json) need it; the language models do not.
fetch eng-fra.txt "" || echo "tfm: warning: no data/eng-fra.txt: the translation configs will not run" >&2
