#!/usr/bin/env bash
# Regenerates the config-key table in docs/config.md (between the keys:begin/keys:end markers) from the
# code's own table (`tfm config --keys`). tests/config/test_config.cpp (the quick tier) fails when the two differ.
#   scripts/dev/update_key_table.sh [path/to/tfm]   (default: $TFM_BINARY, else build/dev/tfm, build/release/tfm)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
tfm_find_binary "${1:-}"
table="$("$TFM_BIN" config --keys)"
TABLE="$table" /usr/bin/python3 - "$TFM_ROOT/docs/config.md" <<'PY'
import os, sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
begin, end = "<!-- keys:begin -->", "<!-- keys:end -->"
if begin not in text or end not in text:
    sys.exit(f"{path}: markers {begin} / {end} not found")
new = text[: text.index(begin) + len(begin)] + "\n" + os.environ["TABLE"].rstrip("\n") + "\n" + text[text.index(end):]
open(path, "w", encoding="utf-8").write(new)
print(f"{path}: key table updated")
PY
