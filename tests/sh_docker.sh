#!/usr/bin/env bash
# The Dockerfile: built (as deploy/k8s names it, choir:latest, under a test
# tag) and run with a fake model mounted at /models; /health, the model list
# and one speech request answer through the published port, and SIGTERM stops
# it. Skipped where no Docker daemon answers. CHOIR_DOCKER_CUDA=1 also builds
# the CUDA variant (--build-arg CUDA=ON; needs NVIDIA's package repository).
# ctest: labels=slow;nosan
set -uo pipefail
SRC=${CHOIR_SOURCE_DIR:?}
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "SKIP: no Docker daemon here"
    exit 0
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/choir-docker-XXXXXX")
TAG=choir:test-$$
NAME=choir-test-$$
cleanup() {
    docker rm -f "$NAME" >/dev/null 2>&1
    docker rmi "$TAG" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; docker logs "$NAME" 2>&1 | tail -n 20; exit 1; }

grep -q 'image: choir:latest' "$SRC/deploy/k8s/deployment.yaml" || fail "deploy/k8s does not name choir:latest"
docker build -q -t "$TAG" "$SRC" >"$T/build.log" 2>&1 || { tail -n 30 "$T/build.log"; fail "docker build"; }

mkdir -p "$T/models/fake"
echo '{"model_type": "choir-fake", "fixed_ms": 5}' >"$T/models/fake/config.json"
head -c 4096 /dev/zero >"$T/models/fake/model.safetensors"
chmod -R a+rX "$T/models"
docker run -d --name "$NAME" -p 127.0.0.1::8000 -v "$T/models:/models:ro" "$TAG" >/dev/null || fail "docker run"
PORT=$(docker port "$NAME" 8000/tcp | head -n 1 | sed 's/.*://')
U=http://127.0.0.1:$PORT
for _ in $(seq 100); do curl -sf "$U/health" >/dev/null && break; sleep 0.2; done
curl -sf "$U/health" | grep -q '"ok"' || fail "/health"
curl -sf "$U/v1/models" | grep -q '"id":"fake"' || fail "/v1/models"
code=$(curl -s -o "$T/speech.pcm" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"model":"tts-1","input":"hello","response_format":"pcm"}' "$U/v1/audio/speech")
[ "$code" = 200 ] && [ "$(stat -c %s "$T/speech.pcm")" = 2400 ] || fail "speech: $code"
[ "$(docker exec "$NAME" id -u)" != 0 ] || fail "the server runs as root"
docker stop -t 15 "$NAME" >/dev/null || fail "docker stop"
[ "$(docker inspect -f '{{.State.ExitCode}}' "$NAME")" = 0 ] || fail "exit code after SIGTERM"
docker logs "$NAME" 2>&1 | grep -q 'stopped cleanly\|SIGTERM' || fail "no graceful stop in the log"

if [ "${CHOIR_DOCKER_CUDA:-0}" = 1 ]; then
    docker build -q -t "$TAG-cuda" --build-arg CUDA=ON "$SRC" >"$T/build-cuda.log" 2>&1 ||
        { tail -n 30 "$T/build-cuda.log"; fail "docker build CUDA=ON"; }
    docker run --rm "$TAG-cuda" --version || fail "CUDA image"
    docker rmi "$TAG-cuda" >/dev/null 2>&1
fi
echo "sh_docker: ok"
