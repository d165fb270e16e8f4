#!/usr/bin/env bash
# Starts `kopf fake-apiserver` as a user would and drives it with kubectl (kubectl.1.31 and
# kubectl.1.32 when they are installed beside the kubectl on the PATH, as the Google Cloud
# SDK does; else the kubectl on the PATH): CRD and custom resources, ConfigMaps, Services,
# Deployments; then stops it with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cargo build --locked -q -p kopf-cli
./target/debug/kopf fake-apiserver --port 0 --kubeconfig "$work/kubeconfig" \
  --apply examples/crd.yaml >"$work/out.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  grep -q 'listening on http://127.0.0.1:' "$work/out.log" && break
  sleep 0.1
done
grep 'listening on http://127.0.0.1:' "$work/out.log"
export KUBECONFIG="$work/kubeconfig"
kubectl_dir="$(dirname "$(readlink -f "$(command -v kubectl)")")"
versions=()
for v in 1.31 1.32; do
  if [ -x "$kubectl_dir/kubectl.$v" ]; then versions+=("$v"); fi
done
[ "${#versions[@]}" -gt 0 ] || versions=(path)
passed=0
for v in "${versions[@]}"; do
  k="$kubectl_dir/kubectl.$v"
  [ "$v" != path ] || k="$(command -v kubectl)"
  export HOME="$work/home-$v"
  mkdir -p "$HOME"
  echo "== kubectl $v"
  "$k" wait --for=condition=Established crd/kopfexamples.kopf.dev --timeout=10s
  "$k" apply -f examples/obj.yaml
  "$k" get kopfexamples kopf-example-1 -o name
  "$k" patch kopfexamples kopf-example-1 --type=merge -p '{"spec":{"field":"patched"}}'
  "$k" get kopfexamples -w --request-timeout=8s >"$work/watch-$v.log" 2>&1 &
  watcher=$!
  # Change the object once the watch is open (the server lists its open watches).
  for _ in $(seq 1 100); do
    "$k" get --raw /__kopf/state | grep -q '"resource":"kopf.dev/v1/kopfexamples"' && break
    sleep 0.1
  done
  "$k" label kopfexamples kopf-example-1 smoke=yes
  wait "$watcher" || true
  # The watch printed the object, then its change.
  test "$(grep -c kopf-example-1 "$work/watch-$v.log")" -ge 2
  "$k" get kopfexamples -l smoke=yes -o name | grep -q kopf-example-1
  "$k" apply -f - <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: smoke-cm}
data: {a: b}
---
apiVersion: v1
kind: Service
metadata: {name: smoke-svc}
spec:
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: smoke-dep}
spec:
  selector: {matchLabels: {app: smoke}}
  template:
    metadata: {labels: {app: smoke}}
    spec: {containers: [{name: c, image: busybox}]}
YAML
  "$k" patch configmap smoke-cm -p '{"data":{"c":"d"}}'
  "$k" label deployment smoke-dep tier=web
  "$k" get configmap,service,deployment -l tier!=none -o name
  "$k" delete configmap smoke-cm
  "$k" delete service smoke-svc
  "$k" delete deployment smoke-dep
  "$k" delete -f examples/obj.yaml
  passed=$((passed + 1))
done
kill -TERM "$pid"
wait "$pid"
echo "smoke: $passed passed, 0 failed"
