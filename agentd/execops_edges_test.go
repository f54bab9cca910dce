package agentd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// The exec list is ordered by start time, not by id: "b" started first is
// listed first. Catches: the start-time comparison's result negated in
// ExecList (`c != 0` made `c == 0`), which orders by id whenever two
// starts differ.
func TestExecListIsInStartOrderNotIDOrder(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(protocol.StartRequest{ExecID: "b", Command: []string{"true"}})
	time.Sleep(2 * time.Millisecond) // two distinct start times
	d.mustStart(protocol.StartRequest{ExecID: "a", Command: []string{"true"}})
	r, err := d.client.ExecListWithResponse(context.Background(), auth(testToken))
	if err != nil || r.JSON200 == nil {
		t.Fatalf("list: %v", err)
	}
	var ids []string
	for _, e := range r.JSON200.Execs {
		ids = append(ids, e.ExecID)
	}
	if strings.Join(ids, ",") != "b,a" {
		t.Fatalf("exec list %v, want [b a] (start order)", ids)
	}
}

// A signal that is delivered logs no failure. Catches: the failure log's
// `err != nil` negated in ExecSignal (every delivered signal logged as a
// failure with a nil error, and a real failure not logged).
func TestDeliveredSignalLogsNoFailure(t *testing.T) {
	d, logs := loggedDaemon(t)
	d.mustStart(shell("sleeper", "exec sleep 30"))
	r, err := d.client.ExecSignalWithResponse(context.Background(), "sleeper", &protocol.ExecSignalParams{Signal: "TERM"}, auth(testToken))
	if err != nil || r.JSON200 == nil || !r.JSON200.Delivered {
		t.Fatalf("signal: %v %s", err, r.Body)
	}
	if strings.Contains(logs.String(), "signal failed") || !strings.Contains(logs.String(), "signal sent") {
		t.Fatalf("log of a delivered signal:\n%s", logs.String())
	}
}
