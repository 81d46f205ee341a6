#!/usr/bin/env bash
# The committed src/server/ui_assets.c must be what tools/embed_assets.sh makes
# from web/ now: a page edited without re-running the script fails here.
set -uo pipefail
SRC=${CHOIR_SOURCE_DIR:?}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-ui-assets-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
bash "$SRC/tools/embed_assets.sh" --stdout >"$TMP/ui_assets.c" || { echo "FAIL: tools/embed_assets.sh"; exit 1; }
if ! cmp -s "$TMP/ui_assets.c" "$SRC/src/server/ui_assets.c"; then
    echo "FAIL: src/server/ui_assets.c is out of date with web/; run tools/embed_assets.sh"
    diff "$TMP/ui_assets.c" "$SRC/src/server/ui_assets.c" | head -n 10
    exit 1
fi
# The check itself can fail: one changed byte in a copy of web/ must show.
mkdir -p "$TMP/tree/tools" "$TMP/tree/web" "$TMP/tree/src/server"
cp "$SRC/tools/embed_assets.sh" "$TMP/tree/tools/"
cp "$SRC/web/"* "$TMP/tree/web/"
echo "/* changed */" >>"$TMP/tree/web/style.css"
bash "$TMP/tree/tools/embed_assets.sh" --stdout >"$TMP/changed.c"
cmp -s "$TMP/changed.c" "$SRC/src/server/ui_assets.c" && { echo "FAIL: a changed web/ file went unnoticed"; exit 1; }
echo "sh_ui_assets: ok"
