package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The reference's coding-agents workflow (examples/coding-agents-on-bedrock/
// run.sh), its Bedrock parts replaced by plain commands, against `microvm
// emulator` with AWS_ENDPOINT_URL and MICROVM_BUCKET set, as a user of the
// reference would point it at a local endpoint: build --reuse --dockerfile
// (the artifact through the emulator's S3), run --keep --egress, cp --mode
// 0600, exec, terminate. Nothing in it needs the guest to reach the host.
//
// Catches: a bucketed build whose artifact goes to AWS's S3 (the DNS lookup
// of <bucket>.s3.<region>.amazonaws.com that stopped the workflow), a build
// that does not take its daemon and Dockerfile from the uploaded artifact,
// a --reuse that rebuilds, a copied secret file without its mode, an env
// file the exec cannot source, a teardown that leaves the VM.
func TestCodingAgentsWorkflowAgainstTheEmulator(t *testing.T) {
	env, _ := lifecycleEnv(t)
	env = append(env, "MICROVM_BUCKET=coding-agents-artifacts", "AWS_EC2_METADATA_DISABLED=true")
	emu := startEmulator(t, env)
	env = append(env, "AWS_ENDPOINT_URL="+emu.url, "AWS_REGION=us-east-1")
	run := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(m)
	}

	// 1. the image, built once per content hash. The agents' install steps
	// are the emulator's to skip (and say so); the daemon lines are the
	// artifact's own.
	here := t.TempDir()
	dockerfile := filepath.Join(here, "Dockerfile")
	if err := os.WriteFile(dockerfile, []byte(`FROM public.ecr.aws/amazonlinux/amazonlinux:2023-minimal
COPY agentd /agentd
RUN chmod 0755 /agentd
RUN dnf install -y nodejs22 npm python3 git tar gzip which findutils procps-ng && dnf clean all
RUN mkdir -p /workspace
WORKDIR /workspace
ENV AGENTD_PORT=9000
ENV AGENTD_LOG=info
EXPOSE 9000
ENTRYPOINT []
CMD ["/agentd"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	agentd := agentdBin(t)
	built := run("build", agentd, "--reuse", "--name", "coding-agents", "--dockerfile", dockerfile, "--region", "us-east-1")
	image := built["imageIdentifier"].(string)
	if built["reused"] != false || !strings.HasPrefix(image, "arn:aws:lambda:us-east-1:") {
		t.Fatalf("%v", built)
	}
	if again := run("build", agentd, "--reuse", "--name", "coding-agents", "--dockerfile", dockerfile, "--region", "us-east-1"); again["reused"] != true || again["imageIdentifier"] != image {
		t.Fatalf("the second build --reuse did not reuse: %v", again)
	}
	lines := strings.Join(anyStrings(run("logs", built["imageName"].(string))["lines"]), "\n")
	if !strings.Contains(lines, "building from s3://coding-agents-artifacts/") || !strings.Contains(lines, "guests run its agentd") {
		t.Fatalf("the build did not read its artifact from the emulator's S3:\n%s", lines)
	}

	// 2. launch, keep, with egress.
	launch := run("run", "--keep", "--egress", "--image", image, "--region", "us-east-1")
	id := launch["microvmId"].(string)
	attach := []string{"--endpoint", launch["endpoint"].(string), "--agent-token", launch["agentToken"].(string), "--microvm-id", id, "--region", "us-east-1"}
	terminated := false
	t.Cleanup(func() {
		if !terminated {
			cli(t, env, "", "terminate", id, "--region", "us-east-1")
		}
	})

	// 3. the credentials file, copied in with its mode; the agent's config.
	envFile := filepath.Join(here, "agent-env")
	if err := os.WriteFile(envFile, []byte("export HOME=/workspace\nexport PATH=/usr/local/bin:/usr/bin:/bin\nexport AWS_REGION=us-east-1\nexport AWS_BEARER_TOKEN_BEDROCK=not-a-real-token\nexport ANTHROPIC_MODEL=plain-model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(append([]string{"cp", envFile, "vm:/workspace/.agent-env", "--mode", "0600"}, attach...)...)
	// The reference's own line, as run.sh writes it: the command string,
	// then the addressing flags, then --json (issue 31: this exited 2 with
	// "missing --endpoint" when every word after the command was the
	// command's).
	mk := cli(t, env, "", append(append([]string{"exec", "mkdir -p /workspace/.codex"}, attach...), "--json")...)
	if d := data(envelope(t, mk)); mk.code != 0 || d["exitCode"] != float64(0) {
		t.Fatalf("exec \"mkdir -p /workspace/.codex\" ATTACH --json: exit %d %v\n%s", mk.code, d, mk.stderr)
	}
	cfg := filepath.Join(here, "config.toml")
	if err := os.WriteFile(cfg, []byte("model = \"plain-model\"\nmodel_provider = \"local\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(append([]string{"cp", cfg, "vm:/workspace/.codex/config.toml", "--mode", "0600"}, attach...)...)

	// 4. the "agents": plain commands in the shell the env file sets up.
	agent := run(append([]string{"exec", ". /workspace/.agent-env && echo \"model=$ANTHROPIC_MODEL home=$HOME\" && printf 'print(\"hello from a microvm\")\\n' > $HOME/hello.py && cat $HOME/hello.py"}, attach...)...)
	if got := agent["stdout"]; got != "model=plain-model home=/workspace\nprint(\"hello from a microvm\")\n" {
		t.Fatalf("the agent step: %v", agent)
	}
	proof := run(append(append([]string{"exec", "stat -c '%a %n' /workspace/.agent-env /workspace/.codex/config.toml; cat /workspace/.codex/config.toml; pwd"}, attach...), "--timeout", "60")...)
	if got := proof["stdout"]; got != "600 /workspace/.agent-env\n600 /workspace/.codex/config.toml\nmodel = \"plain-model\"\nmodel_provider = \"local\"\n/workspace\n" {
		t.Fatalf("proof of work: %v", proof)
	}

	// 5. teardown.
	td := run("terminate", id, "--region", "us-east-1", "--wait")
	terminated = true
	if td["state"] != "TERMINATED" || len(td["leaked"].([]any)) != 0 {
		t.Fatalf("%v", td)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}
