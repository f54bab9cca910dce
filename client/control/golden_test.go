package control

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/emulator"
	cp "github.com/microvms/microvms/gen/controlplane"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the requests the client sends")

// goldenHeaders are the headers compared byte for byte; the signature in
// Authorization covers the rest, so any change to what is signed shows here.
var goldenHeaders = []string{"Authorization", "Content-Type", "Host", "X-Amz-Date"}

// Catches: any change to the bytes of a request: method, path encoding
// (an ARN's ':' must go out as %3A), query order or encoding, body field
// names or union shape, the signing name, region or signed headers.
// Regenerate with: go test ./client/control -run TestGoldenRequests -update
func TestGoldenRequests(t *testing.T) {
	h := newGoldenHarness(t)
	ctx := ctxT(t)
	c := h.c
	img := mustRef(t, "arn:aws:lambda:us-east-1:123456789012:microvm-image:golden")
	var vmID, buildID string
	payload, _ := NewRunHookPayload("agent-token", map[string]string{"GREETING": "hello"})

	calls := []struct {
		op   string
		call func() error
	}{
		{"CreateMicrovmImage", func() error {
			s := testSpec("golden")
			s.BaseImageVersion = "1"
			s.InternetEgress = true
			s.RepairIdentity = true
			s.Tags = map[string]string{"team": "sandbox"}
			_, err := c.CreateImage(ctx, s)
			return err
		}},
		{"GetMicrovmImage", func() error { _, err := c.GetImage(ctx, img); return err }},
		{"ListMicrovmImageBuilds", func() error {
			p, _ := c.ListImageBuilds(img, "1.0", 0)
			b, err := p.NextPage(ctx)
			if err == nil {
				buildID = b[0].BuildId
			}
			return err
		}},
		{"GetMicrovmImageBuild", func() error { _, err := c.GetImageBuild(ctx, img, "1.0", buildID); return err }},
		{"GetMicrovmImageVersion", func() error { _, err := c.GetImageVersion(ctx, img, "1.0"); return err }},
		{"ListMicrovmImageVersions", func() error {
			p, _ := c.ListImageVersions(img, 10)
			_, err := p.NextPage(ctx)
			return err
		}},
		{"ListMicrovmImages", func() error {
			p, _ := c.ListImages("gold", 5)
			_, err := p.NextPage(ctx)
			return err
		}},
		{"ListManagedMicrovmImages", func() error {
			p, _ := c.ListManagedImages(0)
			_, err := p.NextPage(ctx)
			return err
		}},
		{"ListManagedMicrovmImageVersions", func() error {
			p, _ := c.ListManagedImageVersions(c.ManagedBaseImageARN(), 0)
			_, err := p.NextPage(ctx)
			return err
		}},
		{"UpdateMicrovmImage", func() error { _, err := c.UpdateImage(ctx, img, testSpec("golden")); return err }},
		{"TagResource", func() error { return c.TagImage(ctx, img, map[string]string{"owner": "ci"}) }},
		{"ListTags", func() error { _, err := c.ImageTags(ctx, img); return err }},
		{"UntagResource", func() error { return c.UntagImage(ctx, img, "owner", "team") }},
		{"RunMicrovm", func() error {
			vm, err := c.Launch(ctx, LaunchSpec{Image: img, Version: "1.0", Payload: payload, Connectors: Connectors{Ingress: true, InternetEgress: true},
				Idle: &IdlePolicy{MaxIdle: 600 * time.Second, SuspendedFor: 600 * time.Second}, MaxDuration: 3 * time.Hour,
				ExecutionRoleARN: "arn:aws:iam::123456789012:role/exec"})
			if err == nil {
				vmID = vm.MicrovmId
			}
			return err
		}},
		{"GetMicrovm", func() error { _, err := c.GetMicrovm(ctx, vmID); return err }},
		{"ListMicrovms", func() error {
			p, _ := c.ListMicrovms(&img, "1.0", 20)
			_, err := p.NextPage(ctx)
			return err
		}},
		{"CreateMicrovmAuthToken", func() error {
			_, err := c.MintAuthToken(ctx, vmID, TokenRequest{Ports: []PortScope{Port(9000), PortRange(8000, 8100), AllPorts()}, Expiry: 30 * time.Minute})
			return err
		}},
		{"SuspendMicrovm", func() error { return c.Suspend(ctx, vmID) }},
		{"ResumeMicrovm", func() error {
			if _, err := c.WaitSuspended(ctx, vmID, fastWait); err != nil {
				return err
			}
			return c.Resume(ctx, vmID)
		}},
		{"TerminateMicrovm", func() error { return c.Terminate(ctx, vmID) }},
		{"UpdateMicrovmImageVersion", func() error { _, err := c.SetImageVersionStatus(ctx, img, "1.0", cp.INACTIVE); return err }},
		{"DeleteMicrovmImageVersion", func() error { _, err := c.DeleteImageVersion(ctx, img, "1.0"); return err }},
		{"DeleteMicrovmImage", func() error { _, err := c.DeleteImage(ctx, img); return err }},
	}
	seen := map[string]bool{}
	for _, call := range calls {
		if call.op == "UpdateMicrovmImage" || call.op == "RunMicrovm" || call.op == "DeleteMicrovmImage" {
			// Let the running build finish so the next call is accepted.
			if _, err := c.WaitImage(ctx, img, map[string]string{"UpdateMicrovmImage": "1.0", "RunMicrovm": "2.0", "DeleteMicrovmImage": "2.0"}[call.op], fastWait); err != nil {
				t.Fatalf("before %s: %v", call.op, err)
			}
		}
		before := len(h.emu.Requests())
		if err := call.call(); err != nil {
			t.Fatalf("%s: %v", call.op, err)
		}
		reqs := h.emu.Requests()[before:]
		if len(reqs) == 0 {
			t.Fatalf("%s sent nothing", call.op)
		}
		checkGolden(t, call.op, render(reqs[len(reqs)-1]))
		seen[call.op] = true
	}
	if len(seen) != 23 {
		t.Fatalf("golden covers %d operations; want the 23 this client calls (all but CreateMicrovmShellAuthToken)", len(seen))
	}
}

func render(r emulator.Request) []byte {
	var b bytes.Buffer
	target := r.Path
	if r.RawQuery != "" {
		target += "?" + r.RawQuery
	}
	fmt.Fprintf(&b, "%s %s\n", r.Method, target)
	hdr := r.Header.Clone()
	hdr.Set("Host", r.Host)
	names := append([]string(nil), goldenHeaders...)
	sort.Strings(names)
	for _, n := range names {
		if v := hdr.Get(n); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", n, v)
		}
	}
	b.WriteString("\n")
	b.Write(r.Body)
	if len(r.Body) > 0 {
		b.WriteString("\n")
	}
	return b.Bytes()
}

func checkGolden(t *testing.T, op string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", op+".http")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (run with -update to create it)", op, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s request changed:\n--- got\n%s\n--- want\n%s", op, got, want)
	}
}

// newGoldenHarness is newHarness with a fixed Host: the client believes it
// talks to http://emulator.test and the dialer sends every connection to the
// emulator on loopback, so the signature does not depend on the port.
func newGoldenHarness(t *testing.T) *harness {
	t.Helper()
	var addr string
	h := newHarness(t, emulator.Options{Now: func() time.Time { return fixedNow }}, func(o *Options) {
		o.Endpoint = "http://emulator.test"
		o.Random = repeatReader{}
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		}}
	})
	addr = strings.TrimPrefix(h.url, "http://")
	return h
}
