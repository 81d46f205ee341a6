#!/usr/bin/env bash
# scripts/setup.sh chooses sudo only when it must: as root it runs apt-get
# itself (a fresh Debian container has no sudo), as another user through sudo,
# and without sudo it says what to do. Checked with stand-ins for id,
# dpkg-query and sudo on a PATH of their own, in dry-run mode (nothing is
# installed). Also: the README's two quick-start commands run the scripts
# directly, with no sudo in front.
set -uo pipefail
SRC=${CHOIR_SOURCE_DIR:?}
T=$(mktemp -d "${TMPDIR:-/tmp}/choir-setup-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# shims UID WITH_SUDO: a PATH directory with the tools setup.sh uses
shims() {
    local d=$T/bin-$1-$2
    mkdir -p "$d"
    for tool in grep sed cat dirname; do ln -sf "$(command -v $tool)" "$d/$tool"; done
    printf '#!/bin/sh\necho %s\n' "$1" >"$d/id"
    # nothing is installed: every package is missing
    printf '#!/bin/sh\nexit 1\n' >"$d/dpkg-query"
    [ "$2" = 1 ] && printf '#!/bin/sh\nexec "$@"\n' >"$d/sudo"
    chmod +x "$d"/*
    echo "$d"
}
BASH_BIN=$(command -v bash)
run_setup() { # UID WITH_SUDO ARGS...: output in $T/out, status in $rc
    local d
    d=$(shims "$1" "$2")
    shift 2
    PATH=$d CHOIR_SETUP_DRY_RUN=1 "$BASH_BIN" "$SRC/scripts/setup.sh" "$@" >"$T/out" 2>&1
    rc=$?
}

run_setup 0 0
[ $rc = 0 ] || fail "as root without sudo: exit $rc: $(cat "$T/out")"
grep -q '^+ apt-get install -y -qq --no-install-recommends .*libmicrohttpd-dev' "$T/out" || fail "root: $(cat "$T/out")"
grep -q 'sudo' "$T/out" && fail "root used sudo: $(cat "$T/out")"
run_setup 0 1
grep -q '^+ sudo' "$T/out" && fail "root used sudo although it needs none"
run_setup 1000 1
[ $rc = 0 ] || fail "user with sudo: exit $rc"
grep -q '^+ sudo apt-get update -qq' "$T/out" || fail "user with sudo: $(cat "$T/out")"
grep -q '^+ sudo apt-get install .*libmicrohttpd-dev' "$T/out" || fail "user with sudo: $(cat "$T/out")"
run_setup 1000 0
[ $rc = 1 ] || fail "user without sudo: exit $rc"
grep -q 'needs root: run this as root, or install sudo' "$T/out" || fail "user without sudo: $(cat "$T/out")"
# the profiles
run_setup 0 0 --runtime
grep -q 'libmicrohttpd12' "$T/out" && ! grep -q 'build-essential\|chromium' "$T/out" || fail "--runtime: $(cat "$T/out")"
run_setup 0 0 --build
grep -q 'build-essential' "$T/out" && ! grep -q 'chromium' "$T/out" || fail "--build: $(cat "$T/out")"
run_setup 0 0 --build --cuda
grep -q '^+ apt-get install .*cuda-nvcc-' "$T/out" || fail "--build --cuda: $(cat "$T/out")"
run_setup 0 0 --bogus
[ $rc = 2 ] || fail "unknown option: exit $rc"

# The README's quick start: the scripts themselves, executable, no sudo.
cmds=$(sed -n '/^## Quick start/,/^## /p' "$SRC/README.md" | grep -E '^    [^ ]' | sed 's/^    //')
[ "$(echo "$cmds" | wc -l)" = 2 ] || fail "README quick start has not two commands: $cmds"
for c in $cmds; do
    case "$c" in ./scripts/*.sh) ;; *) fail "README command $c" ;; esac
    [ -x "$SRC/$c" ] || fail "$c is not executable"
    grep -q 'scripts/setup.sh' "$SRC/$c" || fail "$c does not set up through scripts/setup.sh"
done
grep -n 'sudo \./scripts' "$SRC/README.md" && fail "README still runs the scripts through sudo"
echo "sh_setup: ok"
