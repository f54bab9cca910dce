package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testimage"
)

// Catches: `run --local --dockerfile` whose RUN steps are not performed
// (or performed on the host's tree), a guest that runs on the host's /usr
// instead of the image's root, --base-image ignored, a repeated build that
// redoes its steps instead of finding them in the state directory, no
// per-step progress, and a failing RUN that does not fail the run or does
// not name its Dockerfile line and exit status.
func TestRunLocalPerformsTheDockerfile(t *testing.T) {
	if err := emulator.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	env, _ := lifecycleEnv(t)
	base := testimage.Base(t, false)
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	body := `FROM public.ecr.aws/amazonlinux/amazonlinux:2023-minimal
COPY --chmod=0755 agentd /agentd
COPY --chmod=0750 tool.sh /opt/tools/
RUN mkdir -p /opt/data && echo built-by-run > /opt/data/by-run && chown 1000:1000 /opt/data
USER builder
RUN echo mine > /opt/data/mine
USER root
WORKDIR /work
ENV AGENTD_PORT=9000
ENTRYPOINT []
CMD ["/agentd"]
`
	if err := os.WriteFile(df, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tool.sh"), []byte("#!/bin/sh\necho tool-from-context\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "pwd; cat /opt/data/by-run; stat -c %U:%u /opt/data/mine; /opt/tools/tool.sh; stat -c %a /opt/tools/tool.sh; if test -e /usr/bin/python3; then echo host-python; fi"
	first := cli(t, env, "", "run", "--local", "--base-image", base, "--dockerfile", df, "--exec", script)
	if first.code != 0 || first.stdout != "/work\nbuilt-by-run\nbuilder:1000\ntool-from-context\n750\n" {
		t.Fatalf("exit %d stdout %q\n%s", first.code, first.stdout, first.stderr)
	}
	for _, want := range []string{"step 3/11 (Dockerfile line 3): COPY --chmod=0750 tool.sh /opt/tools/", "step 4/11 (Dockerfile line 4): RUN mkdir -p /opt/data", "step 4/11: done", "step 6/11: done"} {
		if !strings.Contains(first.stderr, want) {
			t.Fatalf("progress lacks %q:\n%s", want, first.stderr)
		}
	}
	if strings.Contains(first.stderr, "does not perform this Dockerfile step") {
		t.Fatalf("a performed build still warns of unperformed steps:\n%s", first.stderr)
	}
	second := cli(t, env, "", "run", "--local", "--base-image", base, "--dockerfile", df, "--exec", "cat /opt/data/mine")
	if second.code != 0 || second.stdout != "mine\n" {
		t.Fatalf("second run: exit %d stdout %q\n%s", second.code, second.stdout, second.stderr)
	}
	if strings.Contains(second.stderr, ": done") || strings.Count(second.stderr, ": cached") != 5 {
		t.Fatalf("the second build is not all cache hits:\n%s", second.stderr)
	}

	failing := filepath.Join(dir, "Dockerfile.fail")
	if err := os.WriteFile(failing, []byte(strings.Replace(body, "RUN echo mine > /opt/data/mine", "RUN echo about to fail; exit 7", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	inv := cli(t, env, "", "--json", "run", "--local", "--base-image", base, "--dockerfile", failing, "--exec", "true")
	// A failed build is the exit table's ERR_PLATFORM (9), its reason read
	// from the builds (finding build-failure-on-build).
	m := wantFailure(t, inv, taxonomy.KindPlatform, taxonomy.FindingBuildFailureOnBuild)
	msg, _ := m["error"].(string)
	if inv.code != 9 || !strings.Contains(msg, "Dockerfile line 6") || !strings.Contains(msg, "status 7") || !strings.Contains(msg, "about to fail") {
		t.Fatalf("a failing RUN: exit %d error %q\n%s", inv.code, msg, inv.stderr)
	}
}

// Catches: --base-image silently ignored against a running emulator (the
// build succeeded even with a path that does not exist, its RUN steps
// skipped with a warning to pass --base-image, issue 51.1), a refusal that
// does not name `microvm emulator --base-image`, which acts, and a
// missing path accepted where the flag does act (--local, `microvm
// emulator`).
func TestBaseImageIsRefusedWhereItCannotAct(t *testing.T) {
	env, _ := lifecycleEnv(t)
	_, url := testEmulator(t, emulator.Options{})
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM public.ecr.aws/amazonlinux/amazonlinux:2023-minimal\nRUN true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-layout")
	real := testimage.Base(t, false)
	for _, path := range []string{missing, real} {
		inv := cli(t, env, "", "--json", "build", "--control-endpoint", url, "--base-image", path, "--dockerfile", df)
		m := wantFailure(t, inv, taxonomy.KindInvalidArg, "")
		if msg, _ := m["error"].(string); !strings.Contains(msg, "microvm emulator --base-image") {
			t.Fatalf("the refusal of --base-image %s against a running emulator: %q", path, msg)
		}
	}
	for name, args := range map[string][]string{
		"--local":          {"--json", "build", "--local", "--base-image", missing, "--dockerfile", df},
		"microvm emulator": {"--json", "emulator", "--listen", "127.0.0.1:0", "--base-image", missing},
	} {
		inv := cli(t, env, "", args...)
		m := wantFailure(t, inv, taxonomy.KindInvalidArg, "")
		if msg, _ := m["error"].(string); !strings.Contains(msg, missing) {
			t.Fatalf("%s with a missing --base-image: %q", name, msg)
		}
	}
}
