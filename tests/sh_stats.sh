#!/usr/bin/env bash
# `choir stats` summarises a Prometheus page (read here from a saved file).
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/metrics" <<'PAGE'
# TYPE choir_requests_submitted_total counter
choir_requests_submitted_total 12
choir_requests_completed_total 9
choir_requests_rejected_total{reason="queue_full"} 3
choir_request_seconds_quantile{quantile="0.5"} 0.25
choir_request_seconds_quantile{quantile="0.99"} 1.5
choir_memory_budget_bytes 1073741824
PAGE
out=$("$CHOIR_BIN" stats --url "file://$dir/")
echo "$out"
grep -Eq 'submitted +12$' <<<"$out"
grep -Eq 'rejected \(queue_full\) +3$' <<<"$out"
grep -Fq '250.0 ms / 1500.0 ms' <<<"$out"
grep -Eq 'budget +1024 MiB$' <<<"$out"
raw=$("$CHOIR_BIN" stats --url "file://$dir" --raw)
[ "$raw" = "$(cat "$dir/metrics")" ]
# an unreachable server is an error with a message, exit 1
if "$CHOIR_BIN" stats --url "file://$dir/missing" 2>"$dir/err"; then exit 1; fi
grep -q "choir stats" "$dir/err"
"$CHOIR_BIN" stats --bogus 2>/dev/null && exit 1 || [ $? -eq 2 ]
echo ok
