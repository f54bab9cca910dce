#!/usr/bin/env bash
# Claude Code and Codex on a task's repository, in a sandbox whose network
# allows only Bedrock and the package registries, with the Bedrock token
# kept outside the guest. The agents' changes come back as a patch file.
#
#   examples/coding-agents/run.sh REPO_DIR 'TASK'
#
# The policy is enforced by the emulator, outside the guest, so start one
# first (root, for the guest's tun device) and point the CLI at it:
#
#   sudo microvm emulator --listen 127.0.0.1:4566 &
#   export AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1
#
# Against AWS itself the launch is refused (finding egress-connector-or-none:
# the platform offers all of the internet or none of it), never weakened.
#
# Settings (environment):
#   AWS_BEARER_TOKEN_BEDROCK  the token; unset, one is minted (uvx, ~12 h)
#   IMAGE                     an image to launch instead of building Dockerfile
#   BUILD=0                   with IMAGE unset: launch the default image
#   AGENTD                    the agentd binary the build copies in
#   AGENT_SCRIPT              a script run in the repository instead of the
#                             two agents (the repo's test uses a stand-in)
#   PATCH_OUT                 where the patch lands (./agent-changes.patch)
#   CLAUDE_MODEL, CODEX_MODEL the models; MICROVM the CLI (microvm)
set -euo pipefail

REPO="${1:?usage: run.sh REPO_DIR [TASK]}"
TASK="${2:-Read README and fix the first TODO you find; keep the change small.}"
REGION="${AWS_REGION:-us-east-1}"
MICROVM="${MICROVM:-microvm}"
PATCH_OUT="${PATCH_OUT:-$PWD/agent-changes.patch}"
CLAUDE_MODEL="${CLAUDE_MODEL:-global.anthropic.claude-opus-5}"
CODEX_MODEL="${CODEX_MODEL:-openai.gpt-5.6-sol}"
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
jqr() { python3 -c "import json,sys; print(json.load(sys.stdin)['data']$1)"; }

# The hosts the guest may reach. Claude Code in Bedrock mode calls
# bedrock-runtime; Codex speaks the Responses API, which Bedrock serves on
# the Mantle host. The registries are for what the agents install while
# they work (npm, pip). Everything else is refused, DNS lookups included,
# and `microvm network show ID` lists what was refused.
RUNTIME_HOST="bedrock-runtime.$REGION.amazonaws.com"
MANTLE_HOST="bedrock-mantle.$REGION.api.aws"
ALLOW=(--network-allow "$RUNTIME_HOST" --network-allow "$MANTLE_HOST"
  --network-allow registry.npmjs.org --network-allow pypi.org --network-allow files.pythonhosted.org)

# Only an emulator enforces a policy. On AWS the launch would be refused
# (egress-connector-or-none), but only after a build had made an image:
# refuse here, before anything is created.
if [ -z "${AWS_ENDPOINT_URL:-}${AWS_ENDPOINT_URL_LAMBDA_MICROVMS:-}" ]; then
  echo "run.sh: no AWS_ENDPOINT_URL: Lambda MicroVMs offers all of the internet or none (docs/PLATFORM.md, egress-connector-or-none), so the policy needs \`microvm emulator\`" >&2
  exit 2
fi

# ── the credential: on this machine only ────────────────────────────────────
# The token is read from this script's environment by the CLI and bound to
# the two Bedrock hosts. The guest's AWS_BEARER_TOKEN_BEDROCK and
# OPENAI_API_KEY hold opaque placeholders; the policy's proxy puts the real
# value into a request's headers only on its way to a bound host, so a
# prompt-injected agent that sends the variable anywhere else sends a
# placeholder (and anywhere else is refused anyway).
if [ -z "${AWS_BEARER_TOKEN_BEDROCK:-}" ]; then
  AWS_BEARER_TOKEN_BEDROCK=$(uvx --from aws-bedrock-token-generator@latest --quiet python -c \
    "from aws_bedrock_token_generator import provide_token; print(provide_token(region='$REGION'))")
fi
export AWS_BEARER_TOKEN_BEDROCK OPENAI_API_KEY="$AWS_BEARER_TOKEN_BEDROCK"
SECRETS=(--secret-env "AWS_BEARER_TOKEN_BEDROCK@$RUNTIME_HOST" --secret-env "OPENAI_API_KEY@$MANTLE_HOST")

# ── the image ───────────────────────────────────────────────────────────────
IMAGE_ARGS=()
if [ -n "${IMAGE:-}" ]; then
  IMAGE_ARGS=(--image "$IMAGE")
elif [ "${BUILD:-1}" != 0 ]; then
  echo "resolving image (built once per Dockerfile and agentd)..." >&2
  BUILT=$("$MICROVM" build "${AGENTD:?set AGENTD to the agentd binary}" --json --reuse \
    --name coding-agents --dockerfile "$HERE/Dockerfile" --region "$REGION")
  IMAGE_ARGS=(--image "$(echo "$BUILT" | jqr "['imageIdentifier']")")
fi

# ── launch under the policy ─────────────────────────────────────────────────
echo "launching under the network policy..." >&2
LAUNCH=$("$MICROVM" run --json --keep "${IMAGE_ARGS[@]}" "${ALLOW[@]}" "${SECRETS[@]}" --region "$REGION")
ID=$(echo "$LAUNCH" | jqr "['microvmId']")
ATTACH=(--endpoint "$(echo "$LAUNCH" | jqr "['endpoint']")" --agent-token "$(echo "$LAUNCH" | jqr "['agentToken']")"
  --microvm-id "$ID" --region "$REGION")
trap '"$MICROVM" terminate "$ID" --region "$REGION" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
echo "microvm: $ID" >&2

# ── the repository, and the settings that are not secret ────────────────────
tar -cf "$WORK/repo.tar" -C "$REPO" .
"$MICROVM" cp "$WORK/repo.tar" vm:/workspace/repo --tar "${ATTACH[@]}" --json >/dev/null

# PATH is exported because Claude Code's Bash tool snapshots the shell it
# starts from; the daemon's own execs get a minimal environment. No token
# here: the placeholders are already in every exec's environment.
cat > "$WORK/agent-env" <<ENV
export HOME=/workspace
export PATH=/usr/local/bin:/usr/bin:/bin
export AWS_REGION=$REGION
export CLAUDE_CODE_USE_BEDROCK=1
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
export ANTHROPIC_MODEL=$CLAUDE_MODEL
ENV
"$MICROVM" cp "$WORK/agent-env" vm:/workspace/.agent-env --mode 0644 "${ATTACH[@]}" --json >/dev/null
cat > "$WORK/config.toml" <<CFG
model = "$CODEX_MODEL"
model_provider = "bedrock"
[model_providers.bedrock]
name = "Amazon Bedrock (Mantle)"
base_url = "https://$MANTLE_HOST/openai/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
CFG
"$MICROVM" cp "$WORK/config.toml" vm:/workspace/.codex/config.toml --parents "${ATTACH[@]}" --json >/dev/null

# ── the agents ──────────────────────────────────────────────────────────────
# Each runs in the repository; a failing agent does not stop the other or
# the patch (whatever it changed before failing is still worth reading).
IN_REPO=". /workspace/.agent-env && cd /workspace/repo"
# The task in single quotes for the guest's sh (POSIX: ' becomes '\'').
Q="'${TASK//\'/\'\\\'\'}'"
if [ -n "${AGENT_SCRIPT:-}" ]; then
  "$MICROVM" cp "$AGENT_SCRIPT" vm:/workspace/agent.sh --mode 0755 "${ATTACH[@]}" --json >/dev/null
  echo "--- agent ($AGENT_SCRIPT) ---"
  "$MICROVM" exec "$IN_REPO && /workspace/agent.sh $Q" "${ATTACH[@]}" --timeout 600 || echo "agent failed: $?" >&2
else
  echo "--- claude code ---"
  "$MICROVM" exec "$IN_REPO && claude -p $Q --allowedTools Bash,Edit,Write,Read" "${ATTACH[@]}" --timeout 900 || echo "claude failed: $?" >&2
  echo "--- codex ---"
  "$MICROVM" exec "$IN_REPO && codex exec --skip-git-repo-check -s workspace-write $Q" "${ATTACH[@]}" --timeout 900 || echo "codex failed: $?" >&2
fi

# ── the changes, as a patch ─────────────────────────────────────────────────
# Against the uploaded HEAD when the repository is a git one, else against
# an empty tree; new files included. The VM goes at exit, the patch stays.
"$MICROVM" exec "cd /workspace/repo && git -c safe.directory='*' add -A && git -c safe.directory='*' diff --cached --binary \$(git -c safe.directory='*' rev-parse -q --verify HEAD || git hash-object -t tree /dev/null) > /workspace/changes.patch" \
  "${ATTACH[@]}" --timeout 120 >/dev/null
"$MICROVM" cp vm:/workspace/changes.patch "$PATCH_OUT" "${ATTACH[@]}" --json >/dev/null
echo "patch: $PATCH_OUT ($(wc -l <"$PATCH_OUT") lines); apply with git apply" >&2

# What the policy refused, if anything: why an install failed, say.
"$MICROVM" network show "$ID" --region "$REGION" >&2 || true
