package checkpoint

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
)

// writer appends to /tmp/w/log as fast as it can, for as long as it runs.
const writer = `mkdir -p /tmp/w; i=0; while :; do i=$((i+1)); echo "line $i" >> /tmp/w/log; done`

// The chosen policy: writers are paused. With a writer appending through
// the whole checkpoint, the saved log is one moment's file (whole lines
// only, no torn last line), the manifest says so and names nothing as
// changed, and the writer runs on afterwards. Catches: pausing nothing (the
// tar would fail or the file tear), and never continuing the writer.
func TestCheckpointPausesWritersAndContinuesThem(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	x, err := sb.Session().Start(ctx, []string{"sh", "-c", writer}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, "for i in $(seq 1 200); do [ -s /tmp/w/log ] && exit 0; sleep 0.05; done; exit 1")
	m, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/w"}})
	if err != nil {
		t.Fatal(err)
	}
	if !m.WritersPaused || len(m.ChangedUnderneath) != 0 {
		t.Fatalf("manifest: paused %v, changed %v", m.WritersPaused, m.ChangedUnderneath)
	}
	// The writer is running again: its log keeps growing.
	n1 := lines(t, run(t, sb, "wc -l < /tmp/w/log"))
	run(t, sb, "sleep 0.3")
	if n2 := lines(t, run(t, sb, "wc -l < /tmp/w/log")); n2 <= n1 {
		t.Fatalf("the writer did not continue: %d lines, then %d", n1, n2)
	}
	if r, err := x.Poll(ctx); err != nil || r.Phase != protocol.PhaseRunning {
		t.Fatalf("writer %v, %v", r.Phase, err)
	}
	x.Kill(ctx)
	// The restored log ends in a whole line.
	r, err := Restore(ctx, e.store, m.Digest, RestoreOptions{Launch: e.emu.Launch})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Terminate(ctx, teardown)
	got := run(t, r, "tail -c 200 /tmp/w/log")
	if !strings.HasSuffix(got, "\n") || !strings.HasPrefix(got[strings.LastIndex(strings.TrimSuffix(got, "\n"), "\n")+1:], "line ") {
		t.Fatalf("the restored log's tail is torn: %q", got)
	}
}

// NoPause leaves the writer running; the manifest then names the log as
// changed underneath (or, when the daemon saw it change size mid-read,
// the checkpoint fails and writes no manifest). Catches: a NoPause
// checkpoint that claims a consistent tree.
func TestCheckpointWithoutPauseNamesWhatChanged(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	x, err := sb.Session().Start(ctx, []string{"sh", "-c", writer}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Kill(ctx)
	run(t, sb, "for i in $(seq 1 200); do [ -s /tmp/w/log ] && exit 0; sleep 0.05; done; exit 1")
	// The writer runs through the read, but a busy machine may not schedule
	// it between the read and the listing after it: one more line there
	// makes the change the manifest must name certain.
	afterPack = func() { run(t, sb, "echo after >> /tmp/w/log") }
	defer func() { afterPack = nil }()
	m, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/w"}, NoPause: true, Name: "nopause"})
	if err != nil {
		var ce *client.Error
		if !errors.As(err, &ce) {
			t.Fatal(err)
		}
		t.Logf("the read failed as the file changed under it: %v", err)
		if list, _ := e.store.List(ctx); len(list) != 0 {
			t.Fatalf("a failed checkpoint left %v", list)
		}
		return
	}
	if m.WritersPaused || len(m.ChangedUnderneath) != 1 || m.ChangedUnderneath[0] != "/tmp/w/log" {
		t.Fatalf("manifest: paused %v, changed %v; want /tmp/w/log named", m.WritersPaused, m.ChangedUnderneath)
	}
}

func lines(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
