#!/usr/bin/env bash
# The product's main job on one machine, no AWS account: build agentd and the
# microvm CLI, start agentd on loopback, deliver its token through the run hook
# exactly as the platform does, then drive it with the CLI. Everything it
# starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
agentd_pid=""
cleanup() {
  [ -n "$agentd_pid" ] && kill "$agentd_pid" 2>/dev/null && wait "$agentd_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building agentd and microvm" >&2
go build -o "$work/" ./cmd/agentd ./cmd/microvm

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 19000)
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')

echo "== starting agentd on 127.0.0.1:$port" >&2
AGENTD_PORT=$port AGENTD_LISTEN=127.0.0.1 AGENTD_REPAIR_IDENTITY=0 "$work/agentd" 2>"$work/agentd.log" &
agentd_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done

echo "== bootstrapping through the run hook" >&2
curl -fsS -X POST "http://127.0.0.1:$port/aws/lambda-microvms/runtime/v1/run" \
  -H 'Content-Type: application/json' \
  -d "{\"runHookPayload\": \"{\\\"agent_token\\\":\\\"$token\\\"}\"}"

export MICROVM_ENDPOINT="http://127.0.0.1:$port" MICROVM_AGENT_TOKEN="$token" MICROVM_DIRECT=1
mv="$work/microvm"

echo "== microvm health" >&2
"$mv" health
echo "== microvm exec -- uname -a" >&2
"$mv" exec -- uname -a
echo "== microvm --json exec --stream (NDJSON, then one envelope)" >&2
"$mv" --json exec --stream -- sh -c 'for i in 1 2 3; do echo tick-$i; done'
echo "== microvm cp both ways" >&2
echo "hello from the host" >"$work/notes.txt"
"$mv" cp "$work/notes.txt" "vm:$work/in-vm.txt"
"$mv" cp "vm:$work/in-vm.txt" "$work/back.txt"
cmp "$work/notes.txt" "$work/back.txt" && echo "round trip: identical" >&2
echo "== done" >&2
