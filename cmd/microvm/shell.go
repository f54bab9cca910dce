package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ShellCmd opens an interactive terminal in a MicroVM.
type ShellCmd struct {
	AttachFlags
	ID      string        `arg:"" optional:"" name:"ID" help:"The MicroVM (or --microvm-id, MICROVM_ID). A kept MicroVM needs nothing else; agentd's terminal needs its endpoint and agent token otherwise."`
	Pipe    bool          `help:"Accept a stdin that is not a terminal (a pipe, a file): its bytes are typed as they come, with no raw mode and no resize; end the input with exit."`
	Expires time.Duration `help:"The platform shell token's lifetime, whole minutes from 1m to 60m; an open session outlives it." default:"60m" placeholder:"DURATION"`
}

func (c *ShellCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.ID != "" {
		c.MicrovmID = c.ID
	}
	if c.MicrovmID == "" && !c.Direct {
		return nil, render.InvalidArg(taxonomy.FindingShellEndpoint, "missing the MicroVM id (ID, --microvm-id or MICROVM_ID); --direct reaches a daemon by --endpoint alone")
	}
	if a.JSON {
		return nil, render.InvalidArg("", "shell is interactive: its output is a terminal's raw bytes, not JSON; drop --json")
	}
	in, _ := a.Stdin.(*os.File)
	isTerm := in != nil && term.IsTerminal(int(in.Fd()))
	if !isTerm && !c.Pipe {
		return nil, render.InvalidArg("", "shell needs a terminal on stdin, and stdin is not one; pass --pipe to type a pipe's bytes into the shell, or use `microvm exec`")
	}
	// Nothing on the VM is started or stopped but the shell itself: an
	// interrupt leaves the VM as it was (see app.fail).
	a.attached = true
	o := sandbox.ShellOptions{Expires: c.Expires, Agentd: func(ctx context.Context) (*client.Session, error) { return c.session(ctx, a) }}
	if isTerm {
		sz := ttySize(int(in.Fd()))
		o.Rows, o.Cols = sz.Rows, sz.Cols
	}
	sh, err := c.open(ctx, a, o)
	if err != nil {
		return nil, err
	}
	defer sh.Close()
	// Always said, --quiet or not: which terminal this is decides what it
	// can do (the platform's is the guest's own shell, agentd's an exec).
	switch {
	case c.Direct:
		fmt.Fprintf(a.Stderr, "microvm: shell through agentd's PTY at %s (--direct); exit or Ctrl-D ends it\n", c.Endpoint)
	case sh.Via() == sandbox.ShellPlatform:
		fmt.Fprintf(a.Stderr, "microvm: shell on MicroVM %s through the platform's shell endpoint (SHELL_INGRESS); exit or Ctrl-D ends it\n", c.MicrovmID)
	default:
		fmt.Fprintf(a.Stderr, "microvm: shell on MicroVM %s through agentd's PTY (the MicroVM has no SHELL_INGRESS connector); exit or Ctrl-D ends it\n", c.MicrovmID)
	}
	if isTerm {
		fd := int(in.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return nil, client.Errorf(taxonomy.KindUnexpected, "", "putting the terminal in raw mode: %v", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			for {
				select {
				case <-wctx.Done():
					return
				case <-winch:
					sz := ttySize(fd)
					// A failed resize leaves the old size: the session goes on.
					_ = sh.Resize(sz.Rows, sz.Cols)
				}
			}
		}()
	}
	// Keys go over as each read returns; a Read blocked when the shell
	// ends is left to end with the process, as exec --tty's is.
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := a.Stdin.Read(buf)
			if n > 0 {
				if _, werr := sh.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// An interrupt or SIGTERM that reaches this process (a piped session,
	// or a signal from elsewhere: in raw mode Ctrl-C is a key, not a
	// signal) ends the session rather than leaving the read blocked.
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-ctx.Done():
			_ = sh.Close()
		case <-ended:
		}
	}()
	n, err := io.Copy(a.Stdout, sh)
	if ctx.Err() != nil {
		err = client.Errorf(taxonomy.KindInterrupted, "", "the shell session was interrupted")
	}
	a.Streamed = true
	if err != nil {
		return nil, &render.Failure{Err: render.AsClientError(err), Data: cliapi.ShellData{MicrovmID: c.MicrovmID, Via: string(sh.Via()), Bytes: n}}
	}
	return &render.Result{Type: cliapi.TypeShell, Data: cliapi.ShellData{MicrovmID: c.MicrovmID, Via: string(sh.Via()), Bytes: n}, Human: func(io.Writer) error { return nil }}, nil
}

// open is the platform's choice of terminal for the MicroVM, or with
// --direct agentd's at once: a daemon reached directly has no control plane.
func (c *ShellCmd) open(ctx context.Context, a *app, o sandbox.ShellOptions) (*sandbox.Shell, error) {
	if c.Direct {
		sess, err := c.session(ctx, a)
		if err != nil {
			return nil, err
		}
		return sandbox.AgentdShell(ctx, sess, o)
	}
	if _, err := c.fillFromKept(a); err != nil {
		return nil, err
	}
	region, err := c.controlRegion(a.Env)
	if err != nil {
		return nil, err
	}
	pf, err := platform.Open(ctx, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(c.ControlEndpoint, a.Env),
		Emulator: planes.EmulatorSide(nil), Getenv: a.Env})
	if err != nil {
		return nil, err
	}
	if err := a.requireAWSCredentials(ctx, pf); err != nil {
		return nil, err
	}
	return sandbox.OpenShell(ctx, pf.Control(), c.MicrovmID, o)
}
