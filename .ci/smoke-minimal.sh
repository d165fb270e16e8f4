#!/usr/bin/env bash
# The first command of README.md: the minimal operator on the embedded fake API server.
set -euo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo build --locked -q --example minimal
timeout --signal=TERM 10 cargo run --locked -q --example minimal -- run --fake --fake-kubeconfig "$(mktemp -d)/kubeconfig" >"$log" 2>&1 || true
cat "$log"
grep -q "Handler 'create_fn' succeeded" "$log"
grep -q 'status of kopf-example-1: {"create_fn":{"message":"hello world"}}' "$log"
grep -q "Stop requested" "$log"
echo "smoke-minimal: 1 passed, 0 failed"
