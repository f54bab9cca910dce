package embedded

import (
	"context"
	"sync"

	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/sandbox"
)

// DefaultImage is the name of the image Launch registers when the options
// name none.
const DefaultImage = "sandbox"

// controlOnce is the emulator's one control-plane client, made on first use.
type controlOnce struct {
	once sync.Once
	c    *lambdamicrovms.Client
	err  error
}

// Client is the control-plane client Launch and Attach use: the emulator's
// URL and placeholder credentials (no AWS credential chain, no IMDS), fast
// retries. It is made once per emulator.
func (e *Emulator) Client(ctx context.Context) (*lambdamicrovms.Client, error) {
	e.cp.once.Do(func() { e.cp.c, e.cp.err = e.Control(ctx) })
	return e.cp.c, e.cp.err
}

// Launch is a sandbox on this emulator in one call: with no Image it
// registers one (DefaultImage, whose guests run the host agentd Start
// found), and with no Wait.Interval it polls at PollInterval, so it returns
// RUNNING in milliseconds. Everything else is sandbox.Launch, unchanged.
func (e *Emulator) Launch(ctx context.Context, o sandbox.Options) (*sandbox.Sandbox, error) {
	c, err := e.Client(ctx)
	if err != nil {
		return nil, err
	}
	if o.Image == "" {
		o.Image = e.Server.AddImage(DefaultImage)
		o.ImageName = DefaultImage
	}
	if o.Wait.Interval == 0 {
		o.Wait = e.fastWait(o.Wait)
	}
	return sandbox.Launch(ctx, c, o)
}

// Attach reaches a MicroVM on this emulator by id and agent token, as
// sandbox.Attach does against the platform.
func (e *Emulator) Attach(ctx context.Context, id, agentToken string, o sandbox.Options) (*sandbox.Sandbox, error) {
	c, err := e.Client(ctx)
	if err != nil {
		return nil, err
	}
	if o.Wait.Interval == 0 {
		o.Wait = e.fastWait(o.Wait)
	}
	return sandbox.Attach(ctx, c, id, agentToken, o)
}

func (e *Emulator) fastWait(w cplane.WaitOptions) cplane.WaitOptions {
	f := WaitOptions(w.Timeout)
	f.Progress = w.Progress
	if w.Grace != 0 {
		f.Grace = w.Grace
	}
	return f
}
