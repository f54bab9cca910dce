package agentd

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// pollWithin polls once under a client-side deadline, so a hold that does not
// end when it should fails the test instead of stalling it.
func (d *daemon) pollWithin(id string, limit time.Duration) (outcome, error) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	resp, err := d.client.ExecPollWithResponse(ctx, id, auth(testToken))
	if err != nil {
		return outcome{}, err
	}
	var o outcome
	if resp.StatusCode() != http.StatusOK {
		d.t.Fatalf("poll %s: %d %s", id, resp.StatusCode(), resp.Body)
	}
	if err := json.Unmarshal(resp.Body, &o); err != nil {
		d.t.Fatalf("poll body: %v", err)
	}
	return o, nil
}

// A poll held for a running exec answers the moment it exits, with the
// outcome. The hold is a minute and the client gives up after 20 s, so only
// the exit can end it in time. Catches: a hold that waits out its timer
// whatever happens (the exit not among the things it waits for), and a hold
// that answers with the phase read before it waited (running, no outcome).
func TestPollHoldEndsAtTheExitWithTheOutcome(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.PollHold = time.Minute })
	d.mustStart(shell("held", "sleep 1; echo done; exit 7"))
	o, err := d.pollWithin("held", 20*time.Second)
	if err != nil {
		t.Fatalf("the held poll did not answer when the exec exited: %v", err)
	}
	if o.Phase != string(protocol.PhaseExited) || o.ExitCode == nil || *o.ExitCode != 7 || o.Stdout == nil || *o.Stdout != "done\n" {
		t.Fatalf("held poll answered %+v, want the exited outcome", o)
	}
}

// A poll of an exec that keeps running answers running once the hold is
// over. Catches: a hold with no timer (a poll of a long command hangs until
// the command ends, here 30 s, past the client's 20 s).
func TestPollHoldEndsWithRunningWhenTheExecKeepsRunning(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.PollHold = 50 * time.Millisecond })
	d.mustStart(shell("long", "sleep 30"))
	t.Cleanup(func() { d.client.ExecKillWithResponse(context.Background(), "long", auth(testToken)) })
	o, err := d.pollWithin("long", 20*time.Second)
	if err != nil {
		t.Fatalf("the poll of a running exec did not answer after its hold: %v", err)
	}
	if o.Phase != string(protocol.PhaseRunning) || o.ExitCode != nil || o.Stdout != nil {
		t.Fatalf("poll answered %+v, want running and nothing else", o)
	}
}
