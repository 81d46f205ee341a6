#!/usr/bin/env bash
# deploy/k8s offline: yamllint, then a structural check of what a cluster
# would reject or silently mis-wire (kinds and API versions, selectors that
# match their pod labels, probes and Service targetPort naming a declared
# container port, HPA target and its metric). The HPA's custom metric and the
# probes' path are checked against a running `choir serve` (fake model), and
# the container args against the binary's own option parser.
set -euo pipefail
BIN=${CHOIR_BIN:?}
SRC=${CHOIR_SOURCE_DIR:?}
K=$SRC/deploy/k8s
command -v yamllint >/dev/null || { echo "yamllint missing (scripts/setup.sh installs it)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/choir-k8s-XXXXXX")
SERVER=
cleanup() { [ -n "$SERVER" ] && kill -9 "$SERVER" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

yamllint -s -d "{extends: default, rules: {line-length: {max: 120}, document-start: disable}}" "$K" \
    || fail "yamllint"

# The metrics a live replica exposes, for the HPA check.
mkdir -p "$T/models/fake"
echo '{"model_type": "choir-fake"}' >"$T/models/fake/config.json"
head -c 4096 /dev/zero >"$T/models/fake/model.safetensors"
"$BIN" serve --models "$T/models" --port 0 --port-file "$T/port" >"$T/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || fail "choir serve did not start"
curl -sf "http://127.0.0.1:$(cat "$T/port")/metrics" >"$T/metrics.txt" || fail "/metrics"
curl -sf "http://127.0.0.1:$(cat "$T/port")/health" >/dev/null || fail "/health"

python3 - "$K" "$T/metrics.txt" <<'PY' || fail "manifests"
import glob, os, re, sys, yaml
kdir, metrics = sys.argv[1], open(sys.argv[2]).read()
docs = []
for path in sorted(glob.glob(os.path.join(kdir, "*.yaml"))):
    for d in yaml.safe_load_all(open(path)):
        if d:
            docs.append((os.path.basename(path), d))
known = {("apps/v1", "Deployment"), ("v1", "Service"), ("autoscaling/v2", "HorizontalPodAutoscaler"),
         ("kustomize.config.k8s.io/v1beta1", "Kustomization")}
by_kind = {}
name_re = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
for f, d in docs:
    assert (d.get("apiVersion"), d.get("kind")) in known, (f, d.get("apiVersion"), d.get("kind"))
    if d["kind"] != "Kustomization":
        assert name_re.match(d["metadata"]["name"]), (f, d["metadata"]["name"])
    by_kind.setdefault(d["kind"], []).append((f, d))

kust = by_kind["Kustomization"][0][1]
listed = set(kust["resources"])
present = {f for f, d in docs if d["kind"] != "Kustomization"}
assert listed == present, ("kustomization resources", listed, present)

deploys = {d["metadata"]["name"]: d for f, d in by_kind["Deployment"]}
for name, d in deploys.items():
    spec = d["spec"]
    sel = spec["selector"]["matchLabels"]
    labels = spec["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in sel.items()), (name, "selector does not match pod labels")
    for c in spec["template"]["spec"]["containers"]:
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        env = {e["name"] for e in c.get("env", [])}
        for a in c.get("args", []):
            for ref in re.findall(r"\$\((\w+)\)", str(a)):
                assert ref in env, (name, "arg refers to undefined env", ref)
            assert isinstance(a, str), (name, "args must be strings", a)
        mounts = {m["name"] for m in c.get("volumeMounts", [])}
        vols = {v["name"] for v in spec["template"]["spec"].get("volumes", [])}
        assert mounts <= vols, (name, "mount of an undeclared volume", mounts - vols)
        if c["args"][0] == "serve":
            for probe, path in (("readinessProbe", "/health/ready"), ("livenessProbe", "/health/live"),
                                ("startupProbe", "/health/ready")):
                g = c[probe]["httpGet"]
                assert g["path"] == path and g["port"] in ports, (name, probe, g)
            port_arg = int(c["args"][c["args"].index("--port") + 1])
            assert port_arg in ports.values(), (name, "--port is not a containerPort")
            grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
            deadline = float(c["args"][c["args"].index("--shutdown-deadline") + 1])
            pre = c["lifecycle"]["preStop"]["exec"]["command"]
            assert grace > deadline + float(pre[-1]), (name, "grace period shorter than the drain")
serve = next(d for d in deploys.values() if d["spec"]["template"]["spec"]["containers"][0]["args"][0] == "serve")
serve_ports = {p["name"] for p in serve["spec"]["template"]["spec"]["containers"][0]["ports"]}
serve_labels = serve["spec"]["template"]["metadata"]["labels"]

for f, svc in by_kind["Service"]:
    sel = svc["spec"]["selector"]
    assert all(serve_labels.get(k) == v for k, v in sel.items()), (f, "service selects no serve pod")
    for p in svc["spec"]["ports"]:
        assert p["targetPort"] in serve_ports, (f, "targetPort", p["targetPort"])

for f, hpa in by_kind["HorizontalPodAutoscaler"]:
    ref = hpa["spec"]["scaleTargetRef"]
    assert ref["kind"] == "Deployment" and ref["name"] in deploys, (f, ref)
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], f
    for m in hpa["spec"]["metrics"]:
        if m["type"] == "Pods":
            name = m["pods"]["metric"]["name"]
            assert re.search(r"^" + re.escape(name) + r"[ {]", metrics, re.M), (f, "replica does not export", name)
            assert float(m["pods"]["target"]["averageValue"]) > 0, f
print("k8s manifests: %d documents consistent" % len(docs))
PY

# Every option in the containers' args is one the command documents in --help.
python3 - "$K" >"$T/args.txt" <<'PY'
import glob, os, sys, yaml
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.yaml"))):
    for d in yaml.safe_load_all(open(path)):
        if d and d.get("kind") == "Deployment":
            for c in d["spec"]["template"]["spec"]["containers"]:
                print("\t".join(c["args"]))
PY
while IFS=$'\t' read -r -a args; do
    cmd=${args[0]}
    for ((i = 1; i < ${#args[@]}; i++)); do
        case ${args[$i]} in --*) grep -q -- "${args[$i]}" <("$BIN" "$cmd" --help 2>&1) \
            || fail "'choir $cmd' has no option ${args[$i]}" ;; esac
    done
done <"$T/args.txt"
echo "sh_deploy_k8s: ok"
