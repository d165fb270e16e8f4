#!/usr/bin/env bash
# The first command of README.md: the minimal operator on the embedded fake API server.
# Its log shows the creation handled; kubectl, with the kubeconfig it wrote, sees the status;
# SIGTERM stops it with exit status 0.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cargo build --locked -q --example minimal
./target/debug/examples/minimal run --fake --fake-kubeconfig "$work/kubeconfig" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  grep -q 'status of kopf-example-1' "$work/log" && break
  sleep 0.2
done
message="$(KUBECONFIG="$work/kubeconfig" HOME="$work" kubectl get kex kopf-example-1 -o jsonpath='{.status.create_fn.message}')"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
cat "$work/log"
echo "kubectl get kex kopf-example-1: status.create_fn.message=$message; exit status $status"
grep -q "Handler 'create_fn' succeeded" "$work/log"
grep -q 'status of kopf-example-1: {"create_fn":{"message":"hello world"}}' "$work/log"
grep -q "Stop requested" "$work/log"
[ "$message" = "hello world" ]
[ "$status" = 0 ]
echo "smoke-minimal: 1 passed, 0 failed"
