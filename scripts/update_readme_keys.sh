#!/usr/bin/env bash
# Regenerates the config-key table in README.md (between the keys:begin/keys:end markers) from the
# code's own table (`tfm config --keys`). tests/cli/test_readme.cpp fails when the two differ.
#   scripts/update_readme_keys.sh [path/to/tfm]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tfm="${1:-$root/build/release/tfm}"
[ -x "$tfm" ] || { echo "update_readme_keys.sh: build tfm first (or pass its path)" >&2; exit 2; }
table="$("$tfm" config --keys)"
TABLE="$table" /usr/bin/python3 - "$root/README.md" <<'PY'
import os, re, sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
begin, end = "<!-- keys:begin -->", "<!-- keys:end -->"
if begin not in text or end not in text:
    sys.exit(f"{path}: markers {begin} / {end} not found")
new = text[: text.index(begin) + len(begin)] + "\n" + os.environ["TABLE"].rstrip("\n") + "\n" + text[text.index(end):]
open(path, "w", encoding="utf-8").write(new)
print(f"{path}: key table updated")
PY
