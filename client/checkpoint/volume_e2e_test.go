package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client/sandbox"
)

// fakeClock is the volumes' injected clock: a dead holder's lease expires
// when the test moves it, not after real minutes.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (e *env) volumes(keep int) (*Volumes, *fakeClock) {
	clk := &fakeClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	return &Volumes{Store: e.store, Keep: keep, LeaseTTL: time.Minute, Now: clk.now}, clk
}

const volPath = "/tmp/vol"

// Catches: a volume that is not laid at attach (the relaunch sees an empty
// directory), a detach that does not save, and a first attach that fails
// on a volume with no generation instead of giving an empty directory.
func TestVolumeSurvivesTerminateAndRelaunch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, _ := e.volumes(0)
	m, err := ParseMount("proj:" + volPath)
	if err != nil {
		t.Fatal(err)
	}
	sb := e.launch(t)
	a, err := v.Attach(ctx, sb, m)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, sb, "ls -A "+volPath+" | wc -l"); strings.TrimSpace(got) != "0" {
		t.Fatalf("a new volume is not empty: %q", got)
	}
	run(t, sb, "mkdir -p /tmp/vol/src && echo kept > /tmp/vol/src/a && ln -s a /tmp/vol/src/l && chmod 0640 /tmp/vol/src/a")
	saved, err := a.Detach(ctx, true)
	if err != nil || saved == nil || saved.Name != generationName(1) {
		t.Fatalf("Detach = %+v, %v", saved, err)
	}
	sb.Terminate(ctx, teardown)

	sb2 := e.launch(t)
	a2, err := v.Attach(ctx, sb2, m)
	if err != nil {
		t.Fatalf("the volume's holder terminated, yet: %v", err)
	}
	if got := run(t, sb2, "cat /tmp/vol/src/l; stat -c %a /tmp/vol/src/a; readlink /tmp/vol/src/l"); got != "kept\n640\na\n" {
		t.Fatalf("the relaunched sandbox sees %q", got)
	}
	if _, err := a2.Detach(ctx, false); err != nil {
		t.Fatal(err)
	}
	infos, err := v.List(ctx)
	if err != nil || len(infos) != 1 || infos[0].Name != "proj" || len(infos[0].Generations) != 1 || infos[0].Lease != nil {
		t.Fatalf("List = %+v, %v", infos, err)
	}
	if list, _ := e.store.List(ctx); len(list) != 0 {
		t.Fatalf("a volume's generations show as checkpoints: %+v", list)
	}
	if _, err := v.Remove(ctx, "proj"); err != nil {
		t.Fatal(err)
	}
	if infos, _ := v.List(ctx); len(infos) != 0 {
		t.Fatalf("left after Remove: %+v", infos)
	}
}

// Catches: a second writer attaching a held volume (two generations
// chains racing, one silently lost), a refusal that does not name the
// holder, and a release on detach that never happens.
func TestVolumeSecondWriterRefusedWithHolder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, _ := e.volumes(0)
	m := Mount{Name: "shared", Path: volPath}
	sb1, sb2 := e.launch(t), e.launch(t)
	a1, err := v.Attach(ctx, sb1, m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Attach(ctx, sb2, m)
	refusal(t, err, ReasonVolumeLeased)
	if !strings.Contains(err.Error(), sb1.ID()) {
		t.Fatalf("the refusal does not name the holder %s: %v", sb1.ID(), err)
	}
	if _, err := v.Remove(ctx, "shared"); err == nil || !strings.Contains(err.Error(), sb1.ID()) {
		t.Fatalf("removing a held volume: %v", err)
	}
	if held, err := v.Held(ctx, sb1.ID()); err != nil || len(held) != 1 || held[0].Path != volPath {
		t.Fatalf("Held = %+v, %v", held, err)
	}
	if _, err := a1.Detach(ctx, false); err != nil {
		t.Fatal(err)
	}
	a2, err := v.Attach(ctx, sb2, m)
	if err != nil {
		t.Fatalf("after the holder detached: %v", err)
	}
	a2.Detach(ctx, false)
}

// Catches: a lease that never expires (a crashed holder locks the volume
// for ever), one that expires without the TTL passing, a taker that does
// not replace it conditionally, and a stale holder that still saves a
// generation after losing its lease.
func TestVolumeDeadHolderLeaseExpires(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, clk := e.volumes(0)
	m := Mount{Name: "crashy", Path: volPath}
	dead, next := e.launch(t), e.launch(t)
	stale, err := v.Attach(ctx, dead, m)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(v.LeaseTTL - time.Second)
	_, err = v.Attach(ctx, next, m)
	refusal(t, err, ReasonVolumeLeased)
	clk.add(2 * time.Second)
	a, err := v.Attach(ctx, next, m)
	if err != nil {
		t.Fatalf("the dead holder's lease did not expire: %v", err)
	}
	run(t, dead, "echo stale > /tmp/vol/f")
	_, err = stale.Sync(ctx)
	refusal(t, err, ReasonVolumeLeased)
	if !strings.Contains(err.Error(), next.ID()) {
		t.Fatalf("the stale holder's refusal does not name the taker %s: %v", next.ID(), err)
	}
	if gens, _ := v.Generations(ctx, "crashy"); len(gens) != 0 {
		t.Fatalf("a holder that lost its lease saved %+v", gens)
	}
	// The taker renews: its lease outlives the TTL counted from its attach.
	clk.add(v.LeaseTTL - time.Second)
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.add(v.LeaseTTL - time.Second)
	_, err = v.Attach(ctx, dead, m)
	refusal(t, err, ReasonVolumeLeased)
	a.Detach(ctx, false)
}

// Catches: a take of a free lease that is not conditional (two attaches
// racing both win) — the check-then-write a plain PutObject would be.
func TestVolumeLeaseRaceHasOneWinner(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, _ := e.volumes(0)
	for round := range 3 {
		m := Mount{Name: fmt.Sprintf("race%d", round), Path: volPath}
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = v.acquire(ctx, m, fmt.Sprintf("mvm-%d", i))
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			var re *RefusalError
			switch {
			case err == nil:
				won++
			case errors.As(err, &re) && re.Reason == ReasonVolumeLeased:
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d attaches won one lease", round, won)
		}
	}
}

// Catches: generations never pruned (the bucket grows with every sync),
// pruning the newest instead of the oldest, and an attach that lays an
// older generation than the newest.
func TestVolumeKeepsNewestGenerations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, _ := e.volumes(2)
	m := Mount{Name: "gens", Path: volPath}
	sb := e.launch(t)
	a, err := v.Attach(ctx, sb, m)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		run(t, sb, fmt.Sprintf("echo %d > /tmp/vol/n && echo %d > /tmp/vol/only-%d", i, i, i))
		if _, err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.Detach(ctx, false)
	gens, err := v.Generations(ctx, "gens")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range gens {
		names = append(names, g.Name)
	}
	if strings.Join(names, ",") != generationName(4)+","+generationName(3) {
		t.Fatalf("kept %v, want the newest two", names)
	}
	sb2 := e.launch(t)
	a2, err := v.Attach(ctx, sb2, m)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Detach(ctx, false)
	if got := run(t, sb2, "cat /tmp/vol/n; ls /tmp/vol | grep -c only-"); got != "4\n4\n" {
		t.Fatalf("the relaunch sees %q, want generation 4", got)
	}
}

func TestParseMount(t *testing.T) {
	for _, bad := range []string{"noslash", "n:rel/path", "n:/", "n:/a/../b", ":/a", "-n:/a", "n/x:/a"} {
		if _, err := ParseMount(bad); err == nil {
			t.Errorf("ParseMount(%q) accepted", bad)
		}
	}
	if m, err := ParseMount("data.v1:/work/data"); err != nil || m != (Mount{Name: "data.v1", Path: "/work/data"}) {
		t.Fatalf("ParseMount = %+v, %v", m, err)
	}
}

// Catches: a launch whose refused attach leaves the sandbox running or the
// first volume leased, and a Terminate that does not save before it tears
// down.
func TestVolumeLaunchAndTerminate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, _ := e.volumes(0)
	w, err := v.Launch(ctx, e.emu.Launch, sandbox.Options{}, Mount{Name: "a", Path: "/tmp/a"}, Mount{Name: "b", Path: "/tmp/b"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w.Sandbox, "echo 1 > /tmp/a/x && echo 2 > /tmp/b/y")
	before := liveMicrovms(t, e)
	_, err = v.Launch(ctx, e.emu.Launch, sandbox.Options{}, Mount{Name: "c", Path: "/tmp/c"}, Mount{Name: "b", Path: "/tmp/b"})
	refusal(t, err, ReasonVolumeLeased)
	if after := liveMicrovms(t, e); after != before {
		t.Fatalf("a refused launch left a sandbox running (%d live, %d before)", after, before)
	}
	if infos, _ := v.List(ctx); len(infos) != 2 {
		t.Fatalf("a refused launch left volume c leased: %+v", infos)
	}
	rep, saved, err := w.Terminate(ctx, teardown)
	if err != nil || len(saved) != 2 || !rep.MicrovmTerminated {
		t.Fatalf("Terminate = %+v, %+v, %v", rep, saved, err)
	}
	w2, err := v.Launch(ctx, e.emu.Launch, sandbox.Options{}, Mount{Name: "b", Path: "/tmp/b"}, Mount{Name: "a", Path: "/tmp/a"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Terminate(ctx, teardown)
	if got := run(t, w2.Sandbox, "cat /tmp/a/x /tmp/b/y"); got != "1\n2\n" {
		t.Fatalf("relaunch sees %q", got)
	}
}

// liveMicrovms counts the MicroVMs not TERMINATED.
func liveMicrovms(t *testing.T, e *env) int {
	t.Helper()
	c, err := e.emu.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, err := sandbox.List(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range l {
		if s.State != "TERMINATED" {
			n++
		}
	}
	return n
}

// Catches: a lapsed lease taken over while its holder MicroVM is still up
// (a `run --keep` holder nobody renews for, whose later terminate would
// then save its files over the taker's), Remove deleting such a volume,
// and a holder that is gone keeping the volume locked.
func TestVolumeLapsedLeaseOfALiveHolderHolds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, clk := e.volumes(0)
	control, err := e.emu.Control(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v.HolderAlive = HolderAliveOn(control)
	m := Mount{Name: "kept", Path: volPath}
	kept, next := e.launch(t), e.launch(t)
	if _, err := v.Attach(ctx, kept, m); err != nil {
		t.Fatal(err)
	}
	clk.add(v.LeaseTTL + time.Minute) // lapsed: nothing renewed it
	_, err = v.Attach(ctx, next, m)
	refusal(t, err, ReasonVolumeLeased)
	if !strings.Contains(err.Error(), kept.ID()) || !strings.Contains(err.Error(), "still up") {
		t.Fatalf("the refusal does not say the lapsed holder %s is still up: %v", kept.ID(), err)
	}
	if _, err := v.Remove(ctx, "kept"); err == nil {
		t.Fatal("Remove deleted a volume whose holder is still up")
	}
	// The holder ends without detaching: the volume is free.
	kept.Terminate(ctx, sandbox.TeardownOptions{})
	a, err := v.Attach(ctx, next, m)
	if err != nil {
		t.Fatalf("a gone holder's lapsed lease still holds: %v", err)
	}
	a.Detach(ctx, false)
}
