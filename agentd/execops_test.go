package agentd

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestExecSignal sends a named signal to a running exec's group and checks
// the child's trap ran, then the refusals. Wrong edits caught: the signal
// sent to the leader's pid only (the trap in the backgrounded grandchild
// would never fire); kill's escalation reused (the exec would end by SIGKILL,
// not by its trap's exit 7); a name outside the set (SEGV) or in the wrong
// case accepted; an unknown exec answered 200.
func TestExecSignal(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx := context.Background()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	// The group's leader and a backgrounded member each trap USR1; only a
	// group signal reaches both. The member leaves a file, the leader exits 7.
	// The leader sets its trap before it starts the member, so "ready" means
	// both traps are set (the other way round, a loaded machine let USR1
	// reach the leader before its trap, and it died of the signal).
	got := filepath.Join(dir, "member-got-usr1")
	script := `trap 'wait; echo got-usr1; exit 7' USR1
sh -c 'trap "touch ` + got + `; exit 0" USR1; touch ` + ready + `; while :; do sleep 0.05; done' &
while :; do sleep 0.05; done`
	d.mustStart(shell("sig", script))
	waitFile(t, ready)

	send := func(id, sig string) *protocol.ExecSignalReply {
		r, err := d.client.ExecSignalWithResponse(offContract(ctx), id, &protocol.ExecSignalParams{Signal: sig}, auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, bad := range []string{"SEGV", "usr1", "SIGusr1", "", "SIG", "9", "USR1 "} {
		r := send("sig", bad)
		slug := taxonomy.SlugUnknownSignal
		wantSlug(t, "signal "+bad, r.StatusCode(), r.Body, 400, slug)
	}
	r := send("nope", "TERM")
	wantSlug(t, "signal an unknown exec", r.StatusCode(), r.Body, 404, taxonomy.SlugUnknownExec)
	status, body := d.rawPost(t, "/v1/exec/sig/signal")
	wantSlug(t, "signal without ?signal=", status, body, 400, taxonomy.SlugMalformedRequest)

	r = send("sig", "SIGUSR1")
	if r.JSON200 == nil || !r.JSON200.Delivered || r.JSON200.Signal != "USR1" {
		t.Fatalf("signal USR1: %d %s", r.StatusCode(), r.Body)
	}
	o := d.waitExited("sig")
	if o.ExitCode == nil || *o.ExitCode != 7 || o.Stdout == nil || !strings.Contains(*o.Stdout, "got-usr1") {
		t.Fatalf("after USR1: exit %v stdout %v, want the trap's exit 7", o.ExitCode, o.Stdout)
	}
	if _, err := os.Stat(got); err != nil {
		t.Fatalf("the backgrounded member of the group never got USR1: %v", err)
	}
	r = send("sig", "TERM")
	if r.JSON200 == nil || r.JSON200.Delivered {
		t.Fatalf("signal after exit: %d %s, want 200 delivered false", r.StatusCode(), r.Body)
	}
}

// rawPost sends an authorized, bodiless POST of pathQuery, off contract.
func (d *daemon) rawPost(t *testing.T, pathQuery string) (int, []byte) {
	t.Helper()
	return d.rawDo(t, "POST", pathQuery)
}

// TestExecList lists execs in start order with their argv, pid and phase.
// Wrong edits caught: the map's random order leaking out; a shell start
// listed without its script; an exited exec still listed as running.
func TestExecList(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx := context.Background()
	list := func() []protocol.ExecSummary {
		r, err := d.client.ExecListWithResponse(ctx, auth(testToken))
		if err != nil || r.JSON200 == nil {
			t.Fatalf("list: %v %s", err, r.Body)
		}
		return r.JSON200.Execs
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("a fresh daemon lists %v", got)
	}
	d.mustStart(shell("first", "exit 0"))
	d.waitExited("first")
	d.mustStart(protocol.StartRequest{ExecID: "second", Command: []string{"sleep", "30"}})
	got := list()
	if len(got) != 2 || got[0].ExecID != "first" || got[1].ExecID != "second" {
		t.Fatalf("list: %+v, want first then second", got)
	}
	if got[0].Phase != protocol.PhaseExited || got[1].Phase != protocol.PhaseRunning {
		t.Errorf("phases %s %s, want exited running", got[0].Phase, got[1].Phase)
	}
	if !slices.Contains(got[0].Command, "exit 0") || !slices.Equal(got[1].Command, []string{"sleep", "30"}) {
		t.Errorf("commands %q %q", got[0].Command, got[1].Command)
	}
	if got[1].Pid <= 0 || got[1].StartedAt.Before(got[0].StartedAt) || time.Since(got[0].StartedAt) > time.Hour {
		t.Errorf("pid/start: %+v", got)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(int(got[1].Pid))); err != nil {
		t.Errorf("the listed pid %d is not a live process: %v", got[1].Pid, err)
	}
}

// TestMetrics samples twice. Wrong edits caught: memory in kB instead of
// bytes (total would be a thousand times smaller than the kernel's figure);
// CPU use measured since boot on every call (the second window would be the
// uptime again); used greater than total.
func TestMetrics(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	ctx := context.Background()
	get := func() protocol.Metrics {
		r, err := d.client.MetricsWithResponse(ctx, auth(testToken))
		if err != nil || r.JSON200 == nil {
			t.Fatalf("metrics: %v %s", err, r.Body)
		}
		return *r.JSON200
	}
	first := get()
	second := get()
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	ram := uint64(si.Totalram) * uint64(si.Unit)
	if first.Memory.TotalBytes < ram/2 || first.Memory.TotalBytes > ram*2 {
		t.Errorf("memory total %d bytes, the kernel says about %d", first.Memory.TotalBytes, ram)
	}
	if first.Memory.UsedBytes+first.Memory.AvailableBytes != first.Memory.TotalBytes {
		t.Errorf("memory: %+v", first.Memory)
	}
	if first.Disk.TotalBytes == 0 || first.Disk.UsedBytes > first.Disk.TotalBytes || first.Disk.Path == "" {
		t.Errorf("disk: %+v", first.Disk)
	}
	if first.CPU.Count != int32(runtime.NumCPU()) || first.CPU.UsedPercent < 0 || first.CPU.UsedPercent > 100 {
		t.Errorf("cpu: %+v", first.CPU)
	}
	if second.CPU.WindowSecs >= first.CPU.WindowSecs {
		t.Errorf("second window %v s is not shorter than the first's (since boot) %v s", second.CPU.WindowSecs, first.CPU.WindowSecs)
	}
	if first.Load.Load1 < 0 {
		t.Errorf("load: %+v", first.Load)
	}

	// A /proc without the files is a 500 with the slug, not a zero sample.
	d.srv.metrics.procRoot = t.TempDir()
	r, err := d.client.MetricsWithResponse(ctx, auth(testToken))
	if err != nil {
		t.Fatal(err)
	}
	wantSlug(t, "metrics without /proc", r.StatusCode(), r.Body, 500, taxonomy.SlugMetricsUnavailable)
}

func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"TERM", "SIGTERM", "term", "SEGV", "", "SIG", "SIGSIGTERM", "KILL\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, sig, ok := parseSignal(s)
		if !ok {
			return
		}
		if !name.Valid() || signalsByName[name] != sig || (s != string(name) && s != "SIG"+string(name)) {
			t.Fatalf("%q accepted as %q (%d)", s, name, sig)
		}
	})
}

func FuzzProcParsers(f *testing.F) {
	f.Add([]byte("cpu  10 0 5 100 3 0 1 0 0 0\ncpu0 10 0 5 100 3 0 1 0 0 0\n"))
	f.Add([]byte("MemTotal:       16318712 kB\nMemFree: 1 kB\nMemAvailable:   12000000 kB\n"))
	f.Add([]byte("0.52 0.58 0.59 1/1017 12345\n"))
	f.Add([]byte("cpu 18446744073709551615 18446744073709551615 1 1 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := parseProcStat(b); err == nil && c.busy > c.total {
			t.Fatalf("busy %d over total %d", c.busy, c.total)
		}
		if total, avail, err := parseMeminfo(b); err == nil && avail > total {
			t.Fatalf("available %d over total %d", avail, total)
		}
		if l, err := parseLoadavg(b); err == nil && (l.Load1 < 0 || l.Load5 < 0 || l.Load15 < 0) {
			t.Fatalf("negative load %+v", l)
		}
	})
}
