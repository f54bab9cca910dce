package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// KeepaliveCmd holds a MicroVM awake in the foreground, for work nothing
// else is waiting on (a command started with exec --detach).
type KeepaliveCmd struct {
	ID    string        `arg:"" name:"id" help:"The MicroVM to hold awake (a kept one needs nothing else)."`
	Every time.Duration `help:"The interval between pings; unset, a quarter of the MicroVM's maxIdleDurationSeconds." placeholder:"DURATION"`
	For   time.Duration `help:"Stop after this long; unset, hold until Ctrl-C." placeholder:"DURATION"`
	AttachFlags
}

func (c *KeepaliveCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.Every < 0 || c.For < 0 {
		return nil, render.InvalidArg("", "--every and --for are durations, not negative ones")
	}
	if c.MicrovmID == "" {
		c.MicrovmID = c.ID
	}
	if c.MicrovmID != c.ID {
		return nil, render.InvalidArg("", "the MicroVM %s and --microvm-id %s differ", c.ID, c.MicrovmID)
	}
	if c.Direct {
		return nil, render.InvalidArg(taxonomy.FindingIdlePolicy, "--direct reaches the daemon without the endpoint proxy, and only inbound requests through the proxy hold a MicroVM awake")
	}
	sess, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	if c.For > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.For)
		defer cancel()
	}
	// Always printed, --quiet or not: the command holds the terminal.
	fmt.Fprintf(a.Stderr, "microvm: holding MicroVM %s awake with a GET /v1/health through its endpoint; Ctrl-C stops, and it idles out after maxIdleDurationSeconds from the last ping\n", c.ID)
	start := time.Now()
	pings, err := sandbox.HoldAwake(ctx, sess, a.status, c.Every)
	if err != nil {
		return nil, err
	}
	d := cliapi.KeepaliveData{MicrovmID: c.ID, Pings: int64(pings), HeldSeconds: time.Since(start).Seconds()}
	return &render.Result{Type: cliapi.TypeKeepalive, Data: d, Human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "held MicroVM %s awake for %.0fs with %d ping(s); stopped\n", d.MicrovmID, d.HeldSeconds, d.Pings)
		return err
	}}, nil
}
