package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/kept"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// GuestPortFlags name the MicroVM whose guest port url and forward reach.
// The id is all it takes: GetMicrovm reports the state and the endpoint, and
// the control plane mints the token. No agent token is involved, since the
// server behind the port is the guest's own, not agentd.
type GuestPortFlags struct {
	MicrovmID string `name:"microvm-id" help:"The MicroVM whose port to reach; it must be RUNNING. Needed: this or MICROVM_ID." env:"MICROVM_ID" placeholder:"ID"`
	// An attached command's addressing flags, accepted so they can be
	// reused as they are; GetMicrovm is what is believed.
	Endpoint   string `help:"The VM's endpoint, if given: it must be the one GetMicrovm reports for --microvm-id (a check that the two name one VM). Not needed." env:"MICROVM_ENDPOINT"`
	AgentToken string `help:"Not needed and not sent: the server behind the port is the guest's own, not agentd. Accepted so an attached command's flags can be reused." env:"MICROVM_AGENT_TOKEN"`
	// The control plane mints the token; tests and the emulator point it elsewhere.
	ControlEndpoint string `name:"control-endpoint" help:"Control-plane URL (the emulator, a proxy); unset, AWS_ENDPOINT_URL_LAMBDA_MICROVMS then AWS_ENDPOINT_URL apply." env:"MICROVM_CONTROL_ENDPOINT" placeholder:"URL"`
	RegionFlags
}

// minter is the URLMinter for port of the MicroVM the flags name, each
// token living expires. Bad input is refused here, before
// any call: the port, the lifetime, a missing id.
func (f *GuestPortFlags) minter(ctx context.Context, a *app, port int, expires time.Duration) (sandbox.URLMinter, error) {
	// Nothing on the VM is started or stopped, so an interrupt leaves it as
	// it was: see app.fail.
	a.attached = true
	if port < 1 || port > 65535 {
		return nil, render.InvalidArg(taxonomy.FindingAllowedPortsUnion, "port %d is outside 1..65535, the ports a proxy token can name", port)
	}
	// --expires has a default, so zero was typed: refused, not the ceiling.
	ceiling := time.Duration(taxonomy.MaxAuthTokenMinutes) * time.Minute
	if expires < time.Minute || expires > ceiling || expires%time.Minute != 0 {
		return nil, render.InvalidArg(taxonomy.FindingEndpointAuth,
			"--expires %s: a proxy token lives whole minutes from 1m to %s (CreateMicrovmAuthToken's expirationInMinutes)", expires, ceiling)
	}
	if f.MicrovmID == "" {
		return nil, render.InvalidArg(taxonomy.FindingEndpointAuth, "missing --microvm-id (or MICROVM_ID): the proxy token is minted for that MicroVM")
	}
	// A MicroVM this user kept names the control plane it was launched
	// through, unless a flag or variable names one.
	if dir, err := ledgerDir(a, ""); err == nil {
		if m, err := kept.Load(dir, f.MicrovmID); err == nil {
			fillControl(&f.ControlEndpoint, &f.RegionFlags, m, a.Env)
		}
	}
	region, err := f.controlRegion(a.Env)
	if err != nil {
		return nil, err
	}
	pf, err := platform.Open(ctx, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(f.ControlEndpoint, a.Env),
		Emulator: planes.EmulatorSide(nil), Getenv: a.Env})
	if err != nil {
		return nil, err
	}
	if err := a.requireAWSCredentials(ctx, pf); err != nil {
		return nil, err
	}
	cpc := pf.Control()
	id, endpoint := f.MicrovmID, f.Endpoint
	return func(ctx context.Context) (sandbox.PortURL, error) {
		u, err := sandbox.MintURL(ctx, cpc, id, port, sandbox.URLOptions{Expires: expires})
		if err == nil && endpoint != "" && strings.TrimSuffix(cplane.EndpointURL(endpoint), "/")+"/" != u.URL {
			return sandbox.PortURL{}, render.InvalidArg(taxonomy.FindingEndpointBareHost,
				"--endpoint (or MICROVM_ENDPOINT) %s is not MicroVM %s's endpoint, which GetMicrovm reports as %s; drop --endpoint or name the VM it belongs to", endpoint, id, u.URL)
		}
		return u, err
	}, nil
}

// URLCmd prints how to reach one guest port from outside.
type URLCmd struct {
	GuestPortFlags
	Port    int           `required:"" help:"The guest port (1..65535); the token opens it and nothing else." placeholder:"PORT"`
	Expires time.Duration `help:"The token's lifetime: whole minutes, 1m to 60m (the model's expirationInMinutes)." default:"60m" placeholder:"DURATION"`
	Check   bool          `help:"Also send one GET through the URL: the token refused (403) exits 4, nothing listening on the port (502) exits 12; any other status is the guest server's own answer."`
}

func (c *URLCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	mint, err := c.minter(ctx, a, c.Port, c.Expires)
	if err != nil {
		return nil, err
	}
	u, err := mint(ctx)
	if err != nil {
		return nil, err
	}
	d := render.URLData(u)
	if c.Check {
		status, err := u.Check(ctx, nil)
		if err != nil {
			// The URL itself is still good to report beside the refusal.
			return nil, &render.Failure{Err: render.AsClientError(err), Data: map[string]any{"microvmId": d.MicrovmID, "port": d.Port, "url": d.URL, "checkStatus": status}}
		}
		st := int64(status)
		d.CheckStatus = &st
	}
	headers := d.Headers.(map[string]string)
	return &render.Result{Type: cliapi.TypeURL, Data: d, Human: func(w io.Writer) error {
		// The URL alone on the first line, for $(...); then how to use it.
		fmt.Fprintln(w, d.URL)
		var args []string
		for _, k := range slices.Sorted(maps.Keys(headers)) {
			fmt.Fprintf(w, "%s: %s\n", k, headers[k])
			args = append(args, "-H "+shellQuote(k+": "+headers[k]))
		}
		fmt.Fprintf(w, "expires: %s (send both headers; the URL alone is refused)\n", d.ExpiresAt)
		if d.CheckStatus != nil {
			fmt.Fprintf(w, "check: the guest's server answered %d\n", *d.CheckStatus)
		}
		_, err := fmt.Fprintf(w, "curl %s %s\n", strings.Join(args, " "), shellQuote(d.URL))
		return err
	}}, nil
}
