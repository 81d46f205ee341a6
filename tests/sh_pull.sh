#!/usr/bin/env bash
# `choir pull` against a local stand-in for the Hugging Face Hub
# (tests/node/hub_server.mjs, 127.0.0.1 only): a dropped download resumes with
# a Range request, the files arrive byte-identical, a second pull transfers
# nothing, a checksum mismatch fails without leaving a file under its real
# name, unknown repositories and unsafe paths are refused.
set -uo pipefail
BIN=${CHOIR_BIN:?}
SRC=${CHOIR_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 0; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/choir-pull-XXXXXX")
HUB=
cleanup() {
    [ -n "$HUB" ] && { kill "$HUB" && wait "$HUB"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$TMP/hub.log" ] && tail -n 20 "$TMP/hub.log"; exit 1; }

start_hub() { # ARGS...
    [ -n "$HUB" ] && { kill "$HUB" && wait "$HUB"; } 2>/dev/null
    rm -f "$TMP/port" "$TMP/hub.log"
    node "$SRC/tests/node/hub_server.mjs" "$TMP/hub" "$TMP/port" "$TMP/hub.log" "$@" &
    HUB=$!
    for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
    [ -s "$TMP/port" ] || fail "hub server did not start"
    EP=http://127.0.0.1:$(cat "$TMP/port")
}

R=$TMP/hub/acme/tiny
mkdir -p "$R/voices"
echo '{"model_type": "choir-fake"}' >"$R/config.json"
head -c 700000 /dev/urandom >"$R/model.safetensors"
head -c 3000 /dev/urandom >"$R/voices/af_x.bin"
echo 'hello' >"$R/README.md"

start_hub --drop-after 200000
"$BIN" pull acme/tiny --to "$TMP/out" --endpoint "$EP" --json >"$TMP/summary" || fail "pull"
for f in config.json model.safetensors voices/af_x.bin README.md; do
    cmp -s "$R/$f" "$TMP/out/$f" || fail "$f differs"
done
grep -q 'range=bytes=200000-' "$TMP/hub.log" || fail "the dropped download did not resume with a Range request"
grep -q '"files":4,"downloaded":4,"skipped":0' "$TMP/summary" || fail "summary: $(cat "$TMP/summary")"
ls "$TMP/out"/*.part 2>/dev/null && fail ".part files left behind"

# again: nothing is transferred
: >"$TMP/hub.log"
"$BIN" pull acme/tiny --to "$TMP/out" --endpoint "$EP" --json >"$TMP/summary" || fail "second pull"
grep -q '/resolve/' "$TMP/hub.log" && fail "second pull downloaded again"
grep -q '"downloaded":0,"skipped":4' "$TMP/summary" || fail "second summary: $(cat "$TMP/summary")"

# a damaged local file is fetched again
head -c 100 /dev/zero >"$TMP/out/model.safetensors"
"$BIN" pull acme/tiny --to "$TMP/out" --endpoint "$EP" --quiet || fail "repair pull"
cmp -s "$R/model.safetensors" "$TMP/out/model.safetensors" || fail "damaged file not repaired"

# a checksum mismatch fails and leaves no file under the real name
start_hub --corrupt model.safetensors
"$BIN" pull acme/tiny --to "$TMP/bad" --endpoint "$EP" --quiet 2>"$TMP/err"
[ $? = 1 ] || fail "corrupt download not refused"
grep -q 'SHA-256' "$TMP/err" || fail "no checksum message: $(cat "$TMP/err")"
[ -e "$TMP/bad/model.safetensors" ] && fail "corrupt file renamed into place"

# unknown repository / revision, unsafe listing, bad usage
"$BIN" pull acme/nothing --to "$TMP/x" --endpoint "$EP" --quiet 2>/dev/null; [ $? = 1 ] || fail "unknown repo"
"$BIN" pull acme/tiny --revision v9 --to "$TMP/x" --endpoint "$EP" --quiet 2>/dev/null; [ $? = 1 ] || fail "unknown revision"
echo '[{"rfilename": "../../escape.txt", "size": 3}]' >"$TMP/hub/acme/EXTRA_SIBLINGS.json"
"$BIN" pull acme/tiny --to "$TMP/y" --endpoint "$EP" --quiet 2>"$TMP/err"; [ $? = 1 ] || fail "unsafe path accepted"
grep -q unsafe "$TMP/err" || fail "unsafe path message"
[ -e "$TMP/escape.txt" ] && fail "a file escaped the destination"
"$BIN" pull 'bad name!' --endpoint "$EP" 2>/dev/null; [ $? = 2 ] || fail "bad repo name exit code"
"$BIN" pull 2>/dev/null; [ $? = 2 ] || fail "missing REPO exit code"
"$BIN" pull --help | grep -q -- '--revision' || fail "pull --help"
echo "sh_pull: all checks passed"
