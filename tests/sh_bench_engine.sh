#!/usr/bin/env bash
# `choir bench engine` runs end to end on a short load and prints one row per
# batching mode; bad arguments are usage errors. (Figures are not checked:
# performance claims belong to the benchmark's own output, not to tests.)
set -euo pipefail
out=$("$CHOIR_BIN" bench engine --duration 0.3 --loads 40 --fixed-ms 5 --per-char-us 5)
echo "$out"
[ "$(grep -c '^off (1) ' <<<"$out")" -eq 1 ]
[ "$(grep -c '^on ' <<<"$out")" -eq 1 ]
# every offered request completed: nothing refused at this load
awk '/^(off|on)/ { if ($NF != 0) exit 1 }' <<<"$out"
set +e
"$CHOIR_BIN" bench engine --loads nope >/dev/null 2>&1
[ $? -eq 2 ] || exit 1
echo ok
