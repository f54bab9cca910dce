package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ForwardCmd serves a guest port on a local one until Ctrl-C.
type ForwardCmd struct {
	GuestPortFlags
	Ports       string        `arg:"" name:"LOCAL:REMOTE" help:"The local port to listen on (0 picks a free one) and the guest port to reach, e.g. 8080:8080."`
	Address     string        `help:"The local address to listen on. Anything but loopback lets other machines through the forward with this machine's token; it is never the default." default:"127.0.0.1" placeholder:"IP"`
	Expires     time.Duration `help:"Each token's lifetime: whole minutes, 1m to 60m (the model's expirationInMinutes)." default:"60m" placeholder:"DURATION"`
	RenewBefore time.Duration `name:"renew-before" help:"Mint the next token when this little of the current one's life is left; unset, half its lifetime." placeholder:"DURATION"`
}

// parseForwardPorts splits LOCAL:REMOTE; LOCAL may be 0.
func parseForwardPorts(s string) (local, remote int, err error) {
	l, r, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, render.InvalidArg("", "%q is not LOCAL:REMOTE (for example 8080:8080; a LOCAL of 0 picks a free port)", s)
	}
	local, lerr := strconv.Atoi(l)
	remote, rerr := strconv.Atoi(r)
	if lerr != nil || local < 0 || local > 65535 {
		return 0, 0, render.InvalidArg("", "the local port %q in %q is not 0..65535", l, s)
	}
	if rerr != nil || remote < 1 || remote > 65535 {
		return 0, 0, render.InvalidArg(taxonomy.FindingAllowedPortsUnion, "the guest port %q in %q is outside 1..65535, the ports a proxy token can name", r, s)
	}
	return local, remote, nil
}

func (c *ForwardCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	local, remote, err := parseForwardPorts(c.Ports)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(c.Address)
	if ip == nil {
		return nil, render.InvalidArg("", "--address %q is not an IP address", c.Address)
	}
	if c.RenewBefore < 0 {
		return nil, render.InvalidArg(taxonomy.FindingEndpointAuth, "--renew-before %s is negative", c.RenewBefore)
	}
	mint, err := c.minter(ctx, a, remote, c.Expires)
	if err != nil {
		return nil, err
	}
	if c.RenewBefore != 0 && c.Expires != 0 && c.RenewBefore >= c.Expires {
		return nil, render.InvalidArg(taxonomy.FindingEndpointAuth, "--renew-before %s is not shorter than --expires %s: every request would mint", c.RenewBefore, c.Expires)
	}
	fw := sandbox.NewForwarder(mint, sandbox.ForwardOptions{
		RenewBefore: c.RenewBefore,
		// Beyond loopback on purpose: other machines name this one as they will.
		AnyHost:  !ip.IsLoopback(),
		ErrorLog: log.New(a.Stderr, "microvm: forward: ", 0),
		OnMint: func(u sandbox.PortURL) {
			a.Progress("minted a proxy token for MicroVM %s port %d, expiring %s", u.MicrovmID, u.Port, u.ExpiresAt.UTC().Format(time.RFC3339))
		},
	})
	// The first token before listening: a VM that is not RUNNING, a port the
	// control plane refuses or missing credentials fail now, not on the
	// first browser request.
	if _, err := fw.Current(ctx); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(local)))
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "listening on %s:%d: %v", ip, local, err).WithCause(err)
	}
	addr := ln.Addr().String()
	if !ip.IsLoopback() {
		a.Warn("listening on %s, which is not loopback: anyone who reaches it reaches port %d of MicroVM %s with this machine's token", addr, remote, c.MicrovmID)
	}
	// Always printed, --quiet or not: it is the address to open.
	fmt.Fprintf(a.Stderr, "microvm: forwarding http://%s to MicroVM %s port %d; Ctrl-C stops\n", addr, c.MicrovmID, remote)
	if err := sandbox.Forward(ctx, ln, fw); err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "serving %s: %v", addr, err).WithCause(err)
	}
	d := cliapi.ForwardData{MicrovmID: c.MicrovmID, Port: int64(remote), Listen: addr, Mints: int64(fw.Mints())}
	return &render.Result{Type: cliapi.TypeForward, Data: d, Human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "forwarded %s to MicroVM %s port %d; %d token(s) minted; stopped\n", addr, d.MicrovmID, d.Port, d.Mints)
		return err
	}}, nil
}
