#!/usr/bin/env bash
# Starts `kopf fake-apiserver` as a user would and drives it with kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cargo build --locked -q -p kopf-cli
./target/debug/kopf fake-apiserver --port 0 --kubeconfig "$work/kubeconfig" \
  --apply examples/crd.yaml --apply examples/obj.yaml >"$work/out.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  grep -q 'listening on http://127.0.0.1:' "$work/out.log" && break
  sleep 0.1
done
grep 'listening on http://127.0.0.1:' "$work/out.log"
export KUBECONFIG="$work/kubeconfig" HOME="$work/home"
mkdir -p "$HOME"
kubectl get kopfexamples kopf-example-1 -o name
kubectl label kopfexamples kopf-example-1 smoke=yes
kubectl get kopfexamples -l smoke=yes -o name | grep -q kopf-example-1
kubectl delete -f examples/obj.yaml
kill -TERM "$pid"
wait "$pid"
echo "smoke: 1 passed, 0 failed"
