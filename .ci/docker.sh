#!/usr/bin/env bash
# Makes a Docker engine answer on this machine, for `cargo xtask image`. Idempotent: does
# nothing when `docker info` already answers.
#
# - No dockerd: installs Debian's `docker.io` (the engine, containerd, runc; the docker CLI
#   too, though one already on the PATH is kept), as root.
# - dockerd not running: starts it in the background (log: /var/log/kopf-dockerd.log), with
#   no flags first; if that daemon dies or does not answer within 30 s, once more with
#   `--iptables=false --bridge=none --storage-driver=vfs` (for sandboxes that refuse
#   iptables, bridges or overlayfs: `cargo xtask image` uses the host network only).
#   KOPF_DOCKERD_FLAGS, when set, are the flags of the first attempt.
# On the machine this was written on, the plain start worked (no flags needed).
set -euo pipefail

answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

if command -v docker >/dev/null && answers; then
  echo "docker: the engine answers ($(docker info --format '{{.ServerVersion}}'))"
  exit 0
fi

if ! command -v dockerd >/dev/null; then
  echo "docker: installing Debian's docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends docker.io
fi

LOG=/var/log/kopf-dockerd.log
start() {
  echo "docker: starting dockerd $*"
  nohup dockerd "$@" >>"$LOG" 2>&1 </dev/null &
  local pid=$!
  for _ in $(seq 60); do
    if answers; then
      echo "docker: the engine answers ($(docker info --format '{{.ServerVersion}}'), dockerd pid $pid, flags: ${*:-none})"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "docker: dockerd $* exited; its last lines:" >&2
      tail -n 15 "$LOG" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "docker: dockerd $* does not answer after 30 s; stopping it" >&2
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return 1
}

# shellcheck disable=SC2086 # the flags are words on purpose
start ${KOPF_DOCKERD_FLAGS:-} && exit 0
start --iptables=false --bridge=none --storage-driver=vfs && exit 0
echo "error: no Docker engine could be started here (see $LOG)" >&2
exit 1
