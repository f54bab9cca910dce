package client_test

import (
	"errors"
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
