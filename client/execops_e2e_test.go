package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestAgentdSignalExecsMetrics drives Exec.Signal, Session.Execs and
// Session.Metrics against a real agentd. Wrong edits caught: Signal sending
// kill's route (the exec would end by TERM then KILL whatever was asked, so
// HUP's signal number would not come back); an unknown signal not surfacing
// its slug; Execs dropping the argv.
func TestAgentdSignalExecsMetrics(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, "tok")
	s := session(t, d.base, "tok")
	ctx := testCtx(t)
	e, err := s.Start(ctx, []string{"sleep", "30"}, client.StartOptions{ExecID: "sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.Execs(ctx)
	if err != nil || len(list) != 1 || list[0].ExecID != "sleeper" || len(list[0].Command) != 2 || list[0].Phase != protocol.PhaseRunning {
		t.Fatalf("Execs: %+v %v", list, err)
	}
	_, err = e.Signal(ctx, "SEGV")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Slug() != taxonomy.SlugUnknownSignal || client.KindOf(err) != taxonomy.KindProtocol {
		t.Fatalf("Signal SEGV: %v, want unknown_signal", err)
	}
	delivered, err := e.Signal(ctx, "HUP")
	if err != nil || !delivered {
		t.Fatalf("Signal HUP: %v %v", delivered, err)
	}
	var res client.Result
	for range 2000 { // bounded by testCtx too
		if res, err = e.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		if res.Phase != protocol.PhaseRunning {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res.Signal == nil || *res.Signal != 1 {
		t.Fatalf("after HUP: %+v, want ended by signal 1", res)
	}
	m, err := s.Metrics(ctx)
	if err != nil || m.Memory.TotalBytes == 0 || m.CPU.Count < 1 {
		t.Fatalf("Metrics: %+v %v", m, err)
	}
}

// TestAgentdTTY starts a shell on a terminal through the client, resizes
// it, types into it, and reads the terminal's output through the ordinary
// stream. Wrong edits caught: StartOptions.TTY not sent (test -t fails);
// Resize sent to the wrong exec route (the second stty size would not
// change).
func TestAgentdTTY(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, "tok")
	s := session(t, d.base, "tok")
	ctx := testCtx(t)
	e, err := s.Start(ctx, []string{`test -t 1 && echo on-a-tty; stty size; read x; stty size`}, client.StartOptions{
		ExecID: "tty", Shell: true, TTY: &protocol.TTYSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stream(ctx, 0)
	defer st.Close()
	var out []byte
	waitFor := func(want string) {
		t.Helper()
		for !strings.Contains(string(out), want) {
			ev, err := st.Next()
			if err != nil {
				t.Fatalf("stream before %q: %v (have %q)", want, err, out)
			}
			if ev.Kind == client.EventOutput {
				out = append(out, ev.Data...)
			}
		}
	}
	waitFor("24 80")
	if err := e.Resize(ctx, 50, 132); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteStdin(ctx, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	waitFor("50 132")
	if !strings.Contains(string(out), "on-a-tty") {
		t.Fatalf("output %q", out)
	}
}
