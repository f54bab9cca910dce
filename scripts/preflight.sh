#!/usr/bin/env bash
# make check's first step: name every tool this machine lacks for the suites
# that follow, with the Debian package that brings it (the ones .ci/run
# installs), instead of letting one test after another fail deep inside
# (without slirp4netns a local guest with egress dies at launch,
# ERR_LAUNCH_DIED). Only shell builtins here, so a bare PATH still gets an
# answer. PREFLIGHT_SKIP=1 skips it.
set -u
[ "${PREFLIGHT_SKIP:-}" = 1 ] && exit 0

missing=()   # "tool (package): why" lines
packages=()
need() { # need TOOL PACKAGE WHY
  command -v "$1" >/dev/null 2>&1 && return 0
  missing+=("  $1 (apt package $2): $3")
  packages+=("$2")
}
need make make "runs the checks"
need curl curl "the fault suite kills a curl client mid-upload"
need unshare util-linux "the fault suite mounts a tmpfs in a private mount namespace"
need tar tar "GNU tar builds the sparse-archive fixture"
need slirp4netns slirp4netns "local guests with egress get their user-mode network from it"
need ip iproute2 "the egress test makes a network namespace of its own"
need node nodejs "the contract linters and the TypeScript client's tests"
need npm npm "installs the pinned linters and the TypeScript tools"
need python3 python3 "the Python client's tests and boto3"
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import boto3' >/dev/null 2>&1; then
  missing+=("  boto3 (apt package python3-boto3): make test-boto3 drives the emulator with it")
  packages+=(python3-boto3)
fi
if ! command -v go >/dev/null 2>&1; then
  missing+=("  go (Go 1.26 from https://go.dev/dl, not apt): builds and tests everything")
fi

[ ${#missing[@]} -eq 0 ] && exit 0
echo "preflight: this machine lacks what make check needs:" >&2
for line in "${missing[@]}"; do echo "$line" >&2; done
if [ ${#packages[@]} -gt 0 ]; then
  echo "install them with (as .ci/run does):" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${packages[*]}" >&2
fi
echo "or run bash .ci/run, which installs them and then runs make check." >&2
exit 1
