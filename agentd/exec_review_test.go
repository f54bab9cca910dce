package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: decoding a start body under only the gate's max_body_bytes cap
// (readJSON(w, r, &req, 0, "") in ExecStart), which lets one start hold up to
// 512 MiB in memory to decode an argv; and an over-cap start answered with
// anything but the spec's text/plain 413.
func TestStartBodyOverStartCapIs413(t *testing.T) {
	d := bootedDaemon(t, nil)
	// Declared length over the cap: refused from the headers alone, so the
	// body is never sent (a client still writing a MiB the daemon will not
	// read could see its write reset before it reads the 413).
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", testToken, protocol.DefaultMaxStartBodyBytes+1)
	raw := readResponse(t, br, "POST")
	text, _ := io.ReadAll(raw.Body)
	if raw.StatusCode != http.StatusRequestEntityTooLarge || !strings.HasPrefix(raw.Header.Get("Content-Type"), "text/plain") || raw.Header.Get(protocol.VersionHeader) == "" {
		t.Fatalf("declared-length start over the start cap: %d %q %q", raw.StatusCode, raw.Header.Get("Content-Type"), text)
	}
	if !strings.Contains(string(text), "1048576") {
		t.Errorf("413 text does not name the start limit: %q", text)
	}
	// Chunked: no declared length, caught while reading; through the
	// contract-validating client, so the 413's shape is checked against the
	// spec's BodyTooLarge.
	big := protocol.StartRequest{ExecID: "huge", Command: []string{"true", strings.Repeat("x", protocol.DefaultMaxStartBodyBytes)}}
	body, _ := json.Marshal(big)
	req, _ := http.NewRequest("POST", d.base+"/v1/exec/start", io.MultiReader(bytes.NewReader(body)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(text), "1048576") {
		t.Fatalf("chunked start over the start cap: %d %q", resp.StatusCode, text)
	}
	if code, _ := d.poll("huge"); code != http.StatusNotFound {
		t.Fatalf("an over-cap start registered an exec: %d", code)
	}
	// A large start under the cap is still served.
	d.mustStart(protocol.StartRequest{ExecID: "fits", Command: []string{"true", strings.Repeat("y", 100<<10)}})
	if o := d.waitExited("fits"); *o.ExitCode != 0 {
		t.Fatalf("start under the cap: exit %d", *o.ExitCode)
	}
}

// bothSignalPaths runs f with pidfd group signals (Linux 6.9+) and with the
// by-number fallback the platform's 6.1 guest kernel takes.
func bothSignalPaths(t *testing.T, f func(t *testing.T)) {
	for _, pidfd := range []bool{true, false} {
		name := "pidfd"
		if !pidfd {
			name = "by-number"
		}
		t.Run(name, func(t *testing.T) {
			was := pidfdGroupSignals.Load()
			pidfdGroupSignals.Store(pidfd)
			t.Cleanup(func() { pidfdGroupSignals.Store(was) })
			f(t)
		})
	}
}

// reuseNumber simulates what pid reuse does once an exec's group is empty:
// the number the exec captured now names another exec's group.
func reuseNumber(d *daemon, gone, owner string) {
	e, o := d.srv.execs.get(gone), d.srv.execs.get(owner)
	e.sigMu.Lock()
	e.pgid = o.pgid
	e.sigMu.Unlock()
}

func waitEscalations(t *testing.T, d *daemon) {
	t.Helper()
	done := make(chan struct{})
	go func() { d.srv.execs.escalations.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("an escalation never ended")
	}
}

// canaryRuns checks a canary exec stays running for a short bounded while.
func canaryRuns(t *testing.T, d *daemon, id string) {
	t.Helper()
	for range 20 {
		if _, o := d.poll(id); o.Phase != string(protocol.PhaseRunning) {
			t.Fatalf("canary %s was signalled: phase %s signal %s", id, o.Phase, o.raw["signal"])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Catches: ExecKill signalling -pgid by number after the child was reaped and
// its pipes closed (escalate's unconditional unix.Kill(-e.pgid, SIGTERM)):
// once the group is empty the number can name another exec's group, which
// would be killed and reported killed:true.
func TestKillAfterExitSignalsNothing(t *testing.T) {
	bothSignalPaths(t, func(t *testing.T) {
		d := bootedDaemon(t, func(c *Config) { c.KillGrace = 200 * time.Millisecond })
		d.mustStart(shell("canary", "sleep 60"))
		d.mustStart(protocol.StartRequest{ExecID: "done", Command: []string{"true"}})
		d.waitExited("done")
		reuseNumber(d, "done", "canary")
		resp, err := d.client.ExecKillWithResponse(context.Background(), "done", auth(testToken))
		if err != nil || resp.StatusCode() != 200 {
			t.Fatalf("kill: %v %d", err, resp.StatusCode())
		}
		if resp.JSON200.Killed {
			t.Fatal("a kill after the exec's group was gone reported killed:true")
		}
		waitEscalations(t, d)
		canaryRuns(t, d, "canary")
	})
}

// Catches: the escalation goroutine sending SIGKILL to -pgid at the end of
// kill_grace without re-checking that the group can still be the exec's
// (the old unix.Kill(-e.pgid, 0) probe then unix.Kill(-e.pgid, SIGKILL)), and
// a timeout timer left armed past the reap.
func TestEscalationRechecksTheGroupBeforeSIGKILL(t *testing.T) {
	bothSignalPaths(t, func(t *testing.T) {
		d := bootedDaemon(t, func(c *Config) { c.KillGrace = time.Second })
		dir := t.TempDir()
		ready, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "stop")
		d.mustStart(shell("canary", "sleep 60"))
		// The leader dies on SIGTERM; a grandchild that ignores it and holds no
		// pipe keeps the escalation waiting until the test lets it go.
		d.mustStart(shell("x", "(trap '' TERM; touch "+ready+"; while [ ! -e "+stop+" ]; do sleep 0.01; done) </dev/null >/dev/null 2>&1 & sleep 60"))
		deadline := time.Now().Add(10 * time.Second)
		for _, err := os.Stat(ready); err != nil; _, err = os.Stat(ready) {
			if time.Now().After(deadline) {
				t.Fatal("the grandchild never started")
			}
			time.Sleep(5 * time.Millisecond)
		}
		resp, _ := d.client.ExecKillWithResponse(context.Background(), "x", auth(testToken))
		if resp.StatusCode() != 200 || !resp.JSON200.Killed {
			t.Fatalf("kill of a live exec: %d %s", resp.StatusCode(), resp.Body)
		}
		d.waitExited("x")
		reuseNumber(d, "x", "canary")
		if err := os.WriteFile(stop, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitEscalations(t, d)
		canaryRuns(t, d, "canary")
	})
}

// Catches: a spawn with a missing cwd reported as "start sh: no such file or
// directory" (fmt.Errorf("start %s: %w", sp.argv[0], err) with no cwd check),
// which blames argv[0]; and a detail that quotes an env value.
func TestSpawnFailureNamesTheCwd(t *testing.T) {
	d := bootedDaemon(t, nil)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct{ cwd, want string }{
		{"/nonexistent/dir", "no such file or directory"},
		{file, "not a directory"},
	} {
		r := d.start(protocol.StartRequest{ExecID: "cwd", Command: []string{"sh", "-c", "true"}, Cwd: strp(tc.cwd),
			Env: map[string]string{"SECRET": "env-value-never-quoted"}})
		if r.StatusCode() != 500 || r.JSON500.Error != taxonomy.SlugSpawnFailed {
			t.Fatalf("cwd %s: %d %s", tc.cwd, r.StatusCode(), r.Body)
		}
		detail := r.JSON500.Detail
		if !strings.Contains(detail, "cwd") || !strings.Contains(detail, tc.cwd) || !strings.Contains(detail, tc.want) || strings.Contains(detail, "start sh") {
			t.Errorf("cwd %s: detail %q does not name the cwd", tc.cwd, detail)
		}
		if strings.Contains(detail, "env-value-never-quoted") {
			t.Errorf("detail quotes an env value: %q", detail)
		}
	}
	if code, _ := d.poll("cwd"); code != 404 {
		t.Fatalf("a failed spawn registered an exec: %d", code)
	}
}
