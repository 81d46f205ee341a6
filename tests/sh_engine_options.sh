#!/usr/bin/env bash
# The engine's flags are one table (choir_engine_apply_option): `choir serve`,
# `choir worker` and `choir bench engine` refuse the same out-of-range values
# with the same reason, and take sizes the same way ("8Gi" is 8 GiB).
set -euo pipefail
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
mkdir "$dir/models"
refuses() { # refuses REASON COMMAND...: exit 2 and REASON on stderr
    local want=$1 rc=0
    shift
    "$@" >/dev/null 2>"$dir/err" || rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$want" "$dir/err"; then
        echo "FAIL: $* -> exit $rc, wanted 2 and '$want':"; cat "$dir/err"; exit 1
    fi
}
for cmd in "serve --models $dir/models --port 0" "worker --stream s --model m=$dir/models" "bench engine"; do
    # shellcheck disable=SC2086
    refuses "max-batch: bad value '65'" "$CHOIR_BIN" $cmd --max-batch 65
    # shellcheck disable=SC2086
    refuses "workers: bad value '0'" "$CHOIR_BIN" $cmd --workers 0
done
refuses "memory-budget: '8X' is not a size" "$CHOIR_BIN" serve --models "$dir/models" --memory-budget 8X
refuses "memory-budget: '8X' is not a size" "$CHOIR_BIN" worker --stream s --memory-budget 8X
refuses "unknown profile" "$CHOIR_BIN" serve --models "$dir/models" --profile fast
"$CHOIR_BIN" serve --help | grep -q -- '--wait-long-ms MS'
# Sizes as the engine reads them, whichever flag order: the profile applies
# first, so --queue given before it is kept (the profile's own is 256), as the
# queue's x-ratelimit-limit-requests header shows.
mkdir "$dir/models/fake"
printf '{"model_type": "choir-fake"}\n' >"$dir/models/fake/config.json"
head -c 4096 /dev/zero >"$dir/models/fake/model.safetensors"
"$CHOIR_BIN" serve --models "$dir/models" --port 0 --port-file "$dir/port" --memory-budget 8Gi --queue 7 \
    --max-batch 64 --profile offline-stt >"$dir/out" 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
[ -s "$dir/port" ] || { echo "FAIL: serve did not start"; cat "$dir/log"; exit 1; }
page=$(curl -sf "http://127.0.0.1:$(cat "$dir/port")/metrics")
grep -q '^choir_memory_budget_bytes 8589934592$' <<<"$page" || { echo "FAIL: budget"; grep budget <<<"$page"; exit 1; }
hdrs=$(curl -sf -D - -o /dev/null -H 'Content-Type: application/json' \
    -d '{"model":"fake","input":"hi","response_format":"pcm"}' "http://127.0.0.1:$(cat "$dir/port")/v1/audio/speech")
grep -qi '^x-ratelimit-limit-requests: 7' <<<"$hdrs" || { echo "FAIL: --queue before --profile lost"; echo "$hdrs"; exit 1; }
echo ok
