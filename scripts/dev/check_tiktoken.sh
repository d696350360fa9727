#!/usr/bin/env bash
# GPT-2's tokenizer in tfm (data.tokenizer "gpt2") against a real implementation nobody here wrote:
# npm's js-tiktoken, its "gpt2" encoding (OpenAI's tiktoken ranks, in JavaScript).
#   1. Installs js-tiktoken 1.0.21 into a cache outside the repository (once; later runs need no network).
#   2. Writes > 1 MB of mixed text deterministically (scripts/dev/check_tiktoken.mjs corpus): Shakespeare,
#      English-French pairs, C++ from src/, generated Chinese, Japanese, Korean, Greek, Cyrillic, Hebrew,
#      Arabic, Hindi, Thai, emoji with ZWJ sequences, skin tones and flags, accented Latin, lone combining
#      marks, runs of spaces, tabs and newlines, digits, contractions and "'s" after non-letters.
#   3. `tfm tokenizer encode` of it must give js-tiktoken's ids exactly, and `tfm tokenizer decode` of those
#      ids the text byte for byte. Prints tfm's encoding speed.
# Usage: scripts/dev/check_tiktoken.sh [TFM_BINARY]  (default: $TFM_BINARY, else build/dev/tfm, build/release/tfm)
#        scripts/dev/check_tiktoken.sh --install-only   (step 1 alone: scripts/test.sh fetches while it builds)
# Environment: TFM_JS_TIKTOKEN   install directory (default ${XDG_CACHE_HOME:-~/.cache}/tfm/js-tiktoken)
# Exit status: 0 identical, 1 a difference, 2 a setup error, 77 skipped (node/npm missing, or npm cannot
# reach the registry and nothing is installed yet).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
root=$TFM_ROOT
install_only=0
[[ ${1:-} == --install-only ]] && install_only=1

version=1.0.21
home=${TFM_JS_TIKTOKEN:-${XDG_CACHE_HOME:-$HOME/.cache}/tfm/js-tiktoken}
export TFM_JS_TIKTOKEN=$home
tfm_npm_check_package check_tiktoken.sh js-tiktoken "$version" "$home"
((install_only)) && exit 0
tfm_find_binary "${1:-}"
tfm=$TFM_BIN

work=$(mktemp -d "${TMPDIR:-/tmp}/tfm_check_tiktoken.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"
node scripts/dev/check_tiktoken.mjs corpus "$root" "$work/text.txt"
gpt2=(--config configs/tiny.json --set data.tokenizer=gpt2)
"$tfm" tokenizer encode "${gpt2[@]}" --file "$work/text.txt" --stats > "$work/ids.json" 2> "$work/stats.txt" ||
  { cat "$work/stats.txt"; exit 1; }
echo "tfm tokenizer encode: $(cat "$work/stats.txt")"
status=0
node scripts/dev/check_tiktoken.mjs compare "$work/text.txt" "$work/ids.json" || status=1
"$tfm" tokenizer decode "${gpt2[@]}" --file "$work/ids.json" > "$work/decoded.txt"
if cmp -s "$work/text.txt" "$work/decoded.txt"; then
  echo "decode(encode(text)) == text: $(stat -c %s "$work/text.txt") bytes"
else
  echo "decode(encode(text)) differs from the text: $(cmp "$work/text.txt" "$work/decoded.txt" | head -1)"
  status=1
fi
[[ $status == 0 ]] && echo "check_tiktoken.sh: OK (js-tiktoken $version)" || echo "check_tiktoken.sh: FAILED"
exit $status
