package emulator

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/internal/testvm"
)

// Catches: a RUN that installs something passed over in silence, the
// generated stanza's own steps reported as unperformed (every default build
// would warn), and a shell trick hidden in a "simple" RUN.
func TestUnperformedSteps(t *testing.T) {
	stanza := "FROM public.ecr.aws/amazonlinux/amazonlinux:2023-minimal\nCOPY agentd /agentd\nRUN chmod 0755 /agentd\nRUN mkdir -p /workspace\nWORKDIR /workspace\nENV AGENTD_PORT=9000\nEXPOSE 9000\nENTRYPOINT []\nCMD [\"/agentd\"]\n"
	got, err := UnperformedSteps([]byte(stanza))
	if err != nil || len(got) != 0 {
		t.Fatalf("the generated stanza: %v %v", got, err)
	}
	extra := stanza + "RUN dnf install -y git\nCOPY tools /opt/tools\nUSER 1000\nRUN mkdir -p /a; rm -rf /\n"
	got, err = UnperformedSteps([]byte(extra))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"RUN dnf install -y git", "COPY tools /opt/tools", "USER 1000", "RUN mkdir -p /a; rm -rf /"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func artifactZip(t *testing.T, dockerfile string, daemon []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range map[string][]byte{"Dockerfile": []byte(dockerfile), "agentd": daemon} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(body)
	}
	zw.Close()
	p := filepath.Join(t.TempDir(), "artifact.zip")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Scheme: "file", Path: p}).String()
}

func createImage(t *testing.T, base, name, uri string) {
	t.Helper()
	body, _ := json.Marshal(cp.CreateMicrovmImageRequest{Name: name, BaseImageArn: "arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1", BuildRoleArn: "arn:aws:iam::123456789012:role/b", CodeArtifact: cp.CodeArtifact{Uri: &uri}})
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvm-images", string(body), auth); status != 201 {
		t.Fatalf("create: %d %s", status, out)
	}
}

// Catches: a local artifact whose daemon cannot run on this host accepted
// (every launch would then die with a reason naming nothing), the failure's
// reason missing from the builds, where the platform puts it, and a build
// that never writes its log group.
func TestLocalArtifactForAnotherMachineFailsTheBuild(t *testing.T) {
	s, base := serve(t, Options{WallClock: true, StateDir: t.TempDir()})
	notELF := artifactZip(t, "FROM x\n", []byte("#!/bin/sh\n"))
	createImage(t, base, "bad", notELF)
	status, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/bad", "", auth)
	if status != 200 || !strings.Contains(out, `"CREATE_FAILED"`) {
		t.Fatalf("%d %s", status, out)
	}
	_, _, builds := do(t, base, "GET", "/2025-09-09/microvm-images/bad/versions/1.0/builds", "", auth)
	if !strings.Contains(builds, "not an ELF executable") {
		t.Fatalf("the reason is not on the builds: %s", builds)
	}
	if lines := s.LogLines("/aws/lambda-microvms/bad"); len(lines) < 2 || !strings.Contains(strings.Join(lines, "\n"), "FAILED") {
		t.Fatalf("build log: %q", lines)
	}
}

// Catches: a wall-clock launch still counting reads, a guest that does not
// run the agentd its image's artifact carries,
// and a suspended window that never closes.
func TestWallClockLocalImageAndSuspendedWindow(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	s, base := serve(t, Options{WallClock: true, StateDir: t.TempDir(), Now: clk.Now, VMs: UnsafeUnisolatedAgentdLauncher("/nonexistent/agentd", nil)})
	daemon, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	createImage(t, base, "local", artifactZip(t, "FROM x\nCOPY agentd /agentd\nENV FROM_DOCKERFILE=yes\nCMD [\"/agentd\"]\n", daemon))
	if _, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/local", "", auth); !strings.Contains(out, `"CREATED"`) {
		t.Fatalf("a wall-clock build is not done at its first read: %s", out)
	}
	arn := "arn:aws:lambda:us-east-1:123456789012:microvm-image:local"
	p := testvm.Payload()
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn, RunHookPayload: &p, IdlePolicy: &cp.IdlePolicy{MaxIdleDurationSeconds: 60, SuspendedDurationSeconds: 30}})
	status, _, out := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	if status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	var vm cp.RunMicrovmResponse
	json.Unmarshal([]byte(out), &vm)
	// The launcher's own daemon does not exist: only the artifact's can
	// have answered the run hook.
	waitState(t, base, vm.MicrovmId, cp.MicrovmStateRUNNING)
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/suspend", "", auth); status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	if _, _, out := do(t, base, "GET", "/2025-09-09/microvms/"+vm.MicrovmId, "", auth); !strings.Contains(out, `"SUSPENDED"`) {
		t.Fatalf("a wall-clock suspend is not done at once: %s", out)
	}
	clk.Advance(29 * time.Second)
	if live := s.LiveMicrovms(); len(live) != 1 {
		t.Fatalf("ended inside its window: %v", live)
	}
	clk.Advance(2 * time.Second)
	_, _, out = do(t, base, "GET", "/2025-09-09/microvms/"+vm.MicrovmId, "", auth)
	if !strings.Contains(out, `"TERMINATED"`) || !strings.Contains(out, "suspendedDurationSeconds (30)") {
		t.Fatalf("past its window: %s", out)
	}
	if status, typ, _ := do(t, base, "POST", "/2025-09-09/microvms/"+vm.MicrovmId+"/resume", "", auth); status != 409 || typ != "ConflictException" {
		t.Fatalf("resume past the window: %d %s", status, typ)
	}
}
