#!/usr/bin/env bash
# The main job: sets up, builds and shows what choir can do on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/choir info
