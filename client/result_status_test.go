package client

import (
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// Catches: ExitStatus reading 0 for a running exec or a signal-ended one
// (both would pass a `status == 0` check), and the exit code not carried.
func TestResultExitStatus(t *testing.T) {
	i := func(v int32) *int32 { return &v }
	for _, c := range []struct {
		p    protocol.PollResponse
		want int
	}{
		{protocol.PollResponse{Phase: protocol.PhaseRunning}, -1},
		{protocol.PollResponse{Phase: protocol.PhaseExited, ExitCode: i(0)}, 0},
		{protocol.PollResponse{Phase: protocol.PhaseExited, ExitCode: i(3)}, 3},
		{protocol.PollResponse{Phase: protocol.PhaseExited, Signal: i(9)}, 137},
		{protocol.PollResponse{Phase: protocol.PhaseExited}, -1},
	} {
		if got := resultOf(c.p).ExitStatus; got != c.want {
			t.Errorf("%+v: ExitStatus %d, want %d", c.p, got, c.want)
		}
	}
}
