#!/usr/bin/env bash
# The product's main job on one machine, no AWS account: build agentd and the
# microvm CLI, then `microvm run --local` builds an image from agentd, launches
# a MicroVM from it on the in-process emulator (the guest is a real agentd on
# loopback), runs one command in it, prints the VM's answer on stdout and the
# cost and a clean teardown on stderr. Nothing is left running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== CGO_ENABLED=0 go build -o bin/ ./cmd/agentd ./cmd/microvm ./cmd/microvm-guest-init" >&2
CGO_ENABLED=0 go build -o bin/ ./cmd/agentd ./cmd/microvm ./cmd/microvm-guest-init

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export MICROVM_STATE_DIR="$state/runs" MICROVM_ARTIFACT_DIR="$state/artifacts"

echo "== microvm run --local --exec 'uname -a'" >&2
bin/microvm run --local --exec 'uname -a'

echo "== microvm ls (the run's ledger record, closed by the teardown)" >&2
bin/microvm ls
