package agentd

import (
	"context"
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestExecTTY runs a shell on a pseudo-terminal: it sees a terminal of the
// asked size, takes input through the stdin route, reports a resize, and its
// output comes through the ordinary stream. Wrong edits caught: the child
// given pipes (test -t fails); the size not set before the child starts
// (stty size would print 0 0); resize applied to the wrong descriptor; a
// size of 0 accepted; resize on a pipe exec answered 200.
func TestExecTTY(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx := context.Background()
	req := shell("tty", `test -t 0 && test -t 1 && echo is-a-tty; stty size; read line; echo "got:$line"; stty size`)
	req.Tty = &protocol.TTYSize{Rows: 33, Cols: 101}
	d.mustStart(req)

	// Wait until the first stty size has run, then resize and answer read.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.output("tty"), "33 101") {
		if time.Now().After(deadline) {
			t.Fatalf("no size line; output so far %q", d.output("tty"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	r, err := d.client.ExecResizeWithResponse(ctx, "tty", &protocol.ExecResizeParams{Rows: 40, Cols: 120}, auth(testToken))
	if err != nil || r.JSON200 == nil {
		t.Fatalf("resize: %v %s", err, r.Body)
	}
	data := base64.StdEncoding.EncodeToString([]byte("hello\n"))
	s, err := d.client.ExecStdinWithResponse(ctx, "tty", protocol.StdinRequest{DataB64: &data}, auth(testToken))
	if err != nil || s.JSON200 == nil {
		t.Fatalf("stdin: %v %s", err, s.Body)
	}
	o := d.waitExited("tty")
	if o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("exit %v, output %q", o.ExitCode, d.output("tty"))
	}
	out := *o.Stdout
	for _, want := range []string{"is-a-tty", "33 101", "got:hello", "40 120"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if o.Stderr != nil && *o.Stderr != "" {
		t.Errorf("a terminal exec has stderr %q; everything is stdout", *o.Stderr)
	}

	// Refusals.
	bad := shell("tty0", "true")
	bad.Tty = &protocol.TTYSize{Rows: 0, Cols: 80}
	if resp, err := d.client.ExecStartWithResponse(offContract(ctx), bad, auth(testToken)); err != nil || resp.StatusCode() != 400 {
		t.Errorf("tty rows 0: %v %d, want 400", err, resp.StatusCode())
	}
	r, _ = d.client.ExecResizeWithResponse(offContract(ctx), "tty", &protocol.ExecResizeParams{Rows: 0, Cols: 5}, auth(testToken))
	wantSlug(t, "resize to 0 rows", r.StatusCode(), r.Body, 400, taxonomy.SlugMalformedRequest)
	r, _ = d.client.ExecResizeWithResponse(ctx, "tty", &protocol.ExecResizeParams{Rows: 5, Cols: 5}, auth(testToken))
	wantSlug(t, "resize after exit", r.StatusCode(), r.Body, 410, taxonomy.SlugStdinClosed)
	d.mustStart(shell("pipes", "sleep 5"))
	r, _ = d.client.ExecResizeWithResponse(ctx, "pipes", &protocol.ExecResizeParams{Rows: 5, Cols: 5}, auth(testToken))
	wantSlug(t, "resize a pipe exec", r.StatusCode(), r.Body, 409, taxonomy.SlugNotATty)
	r, _ = d.client.ExecResizeWithResponse(ctx, "nope", &protocol.ExecResizeParams{Rows: 5, Cols: 5}, auth(testToken))
	wantSlug(t, "resize an unknown exec", r.StatusCode(), r.Body, 404, taxonomy.SlugUnknownExec)
}

// output is the exec's stdout head so far, read in process.
func (d *daemon) output(id string) string {
	e := d.srv.execs.get(id)
	if e == nil {
		return ""
	}
	out, _, _, _ := e.log.outcome()
	var b strings.Builder
	for _, c := range out.chunks {
		b.Write(c)
	}
	return b.String()
}

// A terminal exec keeps the pidfd clone gave it, as a pipe exec does, so its
// signals and kills take the pidfd path (which needs no proof that the group
// is still the exec's). Catches, in spawnTTY: `pidfd >= 0` negated, or the
// SetNonblock check negated (the descriptor is then closed), either of
// which leaves a terminal exec with none.
func TestTTYExecKeepsItsPidfd(t *testing.T) {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Skip("this kernel has no pidfds")
	}
	unix.Close(fd)
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	req := protocol.StartRequest{ExecID: "tty-pidfd", Command: []string{"sleep", "30"}, Tty: &protocol.TTYSize{Rows: 24, Cols: 80}}
	d.mustStart(req)
	e := d.srv.execs.get("tty-pidfd")
	if e == nil || e.pidfd == nil {
		t.Fatal("a terminal exec holds no pidfd on a kernel that has them")
	}
	r, err := d.client.ExecKillWithResponse(context.Background(), "tty-pidfd", auth(testToken))
	if err != nil || r.StatusCode() != 200 || !r.JSON200.Killed {
		t.Fatalf("kill: %v %d %s", err, r.StatusCode(), r.Body)
	}
	if o := d.waitExited("tty-pidfd"); o.Signal == nil {
		t.Fatalf("after the kill: %s", o.raw)
	}
}
