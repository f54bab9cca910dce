//go:build linux

package emulator

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/internal/testimage"
	"github.com/microvms/microvms/internal/testvm"
)

// The Dockerfile build seen through the control plane: a built image's
// guests run on its root. How the build runs its steps is imagebuild's
// (dockerbuild_linux_test.go there).

// Catches: guests of a Dockerfile-built image run on the host's /usr
// instead of the image's root (the RUN's files missing, the host's
// programs present); image files shown with the guest's host ids (as
// nobody, read-only) instead of the image's owners; guest root unable to
// change an image file (no copy-up over an unmapped lower layer); and a
// build that does not wait for its Dockerfile before reporting CREATED.
func TestGuestRunsOnTheBuiltImageRoot(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	daemon, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	df := "FROM example.test/base:1\nCOPY --chmod=0755 agentd /agentd\n" + strings.SplitN(testvm.Dockerfile, "\n", 2)[1]
	df = strings.Replace(df, "COPY --chmod=0750 tool.sh ./bin/\n", "", 1)
	s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), WallClock: true, StateDir: t.TempDir(), BaseImage: testimage.Base(t, false)})
	uri := artifactZip(t, df, daemon)
	enabled := cp.ENABLED
	create, _ := json.Marshal(cp.CreateMicrovmImageRequest{Name: "dockerfile-root", BaseImageArn: "arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1",
		BuildRoleArn: "arn:aws:iam::123456789012:role/b", CodeArtifact: cp.CodeArtifact{Uri: &uri}, Hooks: &cp.Hooks{MicrovmHooks: &cp.MicrovmHooks{Run: &enabled}}})
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvm-images", string(create), auth); status != 201 {
		t.Fatalf("create: %d %s", status, out)
	}
	var out string
	for i := 0; i < 600; i++ { // bounded: about a minute
		_, _, out = do(t, base, "GET", "/2025-09-09/microvm-images/dockerfile-root", "", auth)
		if !strings.Contains(out, `"CREATING"`) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out, `"CREATED"`) {
		_, _, builds := do(t, base, "GET", "/2025-09-09/microvm-images/dockerfile-root/versions/1.0/builds", "", auth)
		t.Fatalf("the image: %s; builds %s; log %q", out, builds, s.LogLines("/aws/lambda-microvms/dockerfile-root"))
	}
	log := strings.Join(s.LogLines("/aws/lambda-microvms/dockerfile-root"), "\n")
	if !strings.Contains(log, "step 6/10 (line 6): RUN echo") || !strings.Contains(log, "guests run on it") {
		t.Fatalf("build log: %s", log)
	}
	p := testvm.Payload()
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: "arn:aws:lambda:us-east-1:123456789012:microvm-image:dockerfile-root", RunHookPayload: &p})
	status, _, resp := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	if status != 200 {
		t.Fatalf("RunMicrovm: %d %s", status, resp)
	}
	var r cp.RunMicrovmResponse
	if err := json.Unmarshal([]byte(resp), &r); err != nil {
		t.Fatal(err)
	}
	sess := session(t, base, waitState(t, base, r.MicrovmId, cp.MicrovmStateRUNNING))
	if got := testvm.MustSh(t, sess, "pwd; cat made-by-run"); got != "/srv/app\nhello from run, base said yes" {
		t.Fatalf("the guest's view of the RUN's effects: %q", got)
	}
	if got := testvm.MustSh(t, sess, "stat -c %u:%g:%U /opt/data/owned-by-builder /home/builder/base-owned"); got != "1000:1000:builder\n1000:1000:builder" {
		t.Fatalf("image owners inside the guest: %q, want the image's (1000, builder)", got)
	}
	if got := testvm.MustSh(t, sess, "echo guest >> /srv/app/made-by-run && cat /srv/app/made-by-run && echo x > /home/builder/base-owned && id -u"); !strings.HasSuffix(got, "guest\n0") {
		t.Fatalf("guest root changing image files: %q", got)
	}
	for _, host := range []string{"/usr/bin/python3", "/usr/bin/env", "/usr/bin/git"} {
		if _, err := os.Stat(host); err != nil {
			continue
		}
		if code, _ := testvm.Sh(t, sess, "test -e "+host); code == 0 {
			t.Errorf("the host's %s is visible in a guest of a Dockerfile-built image", host)
		}
	}
	terminate(t, base, r.MicrovmId)
}
