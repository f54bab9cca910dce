#!/usr/bin/env bash
# make check-loaded: the suites that race a child process or a server (agentd,
# client, cmd/microvm, emulator) run beside CPU hogs, each test twice, so a test
# that leans on timing or on an order the code does not promise fails here
# rather than on a busy CI machine. HOGS (default 2) hogs; LOADED_PKGS,
# LOADED_COUNT and LOADED_FLAGS (e.g. -race) change what runs.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
HOGS=${HOGS:-2}
PKGS=${LOADED_PKGS:-./agentd/ ./client/... ./cmd/microvm/... ./emulator/}
COUNT=${LOADED_COUNT:-2}
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
for _ in $(seq "$HOGS"); do
  yes >/dev/null &
  pids+=($!)
done
# One package at a time: the hogs are the load, not the suites beside each other.
status=0
for pkg in $PKGS; do
  echo "== $pkg (count $COUNT, $HOGS hogs) ${LOADED_FLAGS:-}"
  # shellcheck disable=SC2086
  $GO test -count="$COUNT" -p 1 ${LOADED_FLAGS:-} "$pkg" || status=1
done
exit $status
