package client_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
)

// pingsSettle waits until s has sent no keep-awake ping for a while and
// returns the count: the pinger stops at its first tick with nothing in
// flight, and a ping already sent ends within one interval.
func pingsSettle(t *testing.T, s *client.Session, every time.Duration) int64 {
	t.Helper()
	last := s.KeepAwakePings()
	for i := 0; i < 100; i++ { // bounded
		time.Sleep(5 * every)
		n := s.KeepAwakePings()
		if n == last {
			return n
		}
		last = n
	}
	t.Fatalf("keep-awake pings never stopped: %d and counting", last)
	return 0
}

// Catches: a keep-awake that pings while nothing is in flight (an idle
// sandbox would never suspend and would bill on), one that does not ping
// while a file read, an exec stream or a Run is open, one that never
// stops after the work ends, and one on by default.
func TestKeepAwakePingsOnlyWhileWorkIsInFlight(t *testing.T) {
	ctx := testCtx(t)
	d := startAgentd(t)
	d.bootstrap(t, "tok")
	const every = 20 * time.Millisecond
	s := session(t, d.base, "tok", client.WithKeepAwake(every))

	time.Sleep(10 * every)
	if n := s.KeepAwakePings(); n != 0 {
		t.Fatalf("%d pings with nothing in flight", n)
	}
	if err := s.WriteFile(ctx, d.dir+"/keepawake-probe", bytes.NewReader([]byte("probe")), 0o644); err != nil {
		t.Fatal(err)
	}
	base := pingsSettle(t, s, every)

	// A read held open, not read: a transfer in flight.
	rc, err := s.OpenFile(ctx, d.dir+"/keepawake-probe", client.LineRange{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; s.KeepAwakePings() == base; i++ {
		if i == 1000 { // bounded
			t.Fatal("no ping while a file read was open")
		}
		time.Sleep(every)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	base = pingsSettle(t, s, every)

	// An exec stream open until its exit event.
	_, st, err := s.StartStream(ctx, []string{"/bin/sh", "-c", "sleep 0.5; echo done"}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Next(); err != nil {
			break
		}
	}
	st.Close()
	if n := pingsSettle(t, s, every); n == base {
		t.Fatal("no ping while an exec stream was open for half a second")
	} else {
		base = n
	}

	// Run, the same.
	if r, err := s.Run(ctx, []string{"/bin/sh", "-c", "sleep 0.5"}, client.RunOptions{}); err != nil || r.ExitStatus != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	if n := pingsSettle(t, s, every); n == base {
		t.Fatal("no ping while Run waited half a second")
	}

	// Off by default.
	quiet := session(t, d.base, "tok")
	if _, err := quiet.Run(ctx, []string{"/bin/sh", "-c", "sleep 0.3"}, client.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := quiet.KeepAwakePings(); n != 0 {
		t.Fatalf("a session without WithKeepAwake sent %d pings", n)
	}
}
