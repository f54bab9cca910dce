package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// session opens the client session the addressing flags name. Without
// --direct the session is proxied: every request carries a proxy token that
// the session mints (lazily, inside its retry path) through the control
// plane's CreateMicrovmAuthToken for --microvm-id, scoped to --port. getenv
// is read only on that path, for the control plane's region.
func (f *AttachFlags) session(ctx context.Context, a *app) (*client.Session, error) {
	// From here on the command addresses a VM it did not launch, so an
	// interrupt leaves everything as it was: see app.fail.
	a.attached = true
	// Not required by the parser: kong would print both as required even
	// when the variables fill them, and its refusal would not name the
	// variables.
	if _, err := f.fillFromKept(a); err != nil {
		return nil, err
	}
	var missing []string
	if f.Endpoint == "" {
		missing = append(missing, "--endpoint (or MICROVM_ENDPOINT)")
	}
	if f.AgentToken == "" {
		missing = append(missing, "--agent-token (or MICROVM_AGENT_TOKEN)")
	}
	if len(missing) > 0 {
		return nil, render.InvalidArg("", "missing %s: the VM to attach to is named by its endpoint and the agent token given at launch%s", strings.Join(missing, " and "), notKeptHint(a, f))
	}
	if f.Port < 1 || f.Port > 65535 {
		return nil, render.InvalidArg(taxonomy.FindingAgentPortAgreement, "--port %d is not a TCP port", f.Port)
	}
	// GetMicrovm's endpoint is a bare host (finding endpoint-bare-host), so
	// it is accepted as given; EndpointURL picks the scheme.
	endpoint := cplane.EndpointURL(f.Endpoint)
	if f.Direct {
		return client.Direct(endpoint, f.AgentToken)
	}
	if f.MicrovmID == "" {
		// A missing argument, as the reference's required flag is: exit 2
		// before anything is sent.
		return nil, render.InvalidArg(taxonomy.FindingEndpointAuth,
			"missing --microvm-id (or MICROVM_ID): a proxied attach mints the endpoint proxy token for that MicroVM; pass --direct for a daemon reached without the proxy")
	}
	region, err := f.controlRegion(a.Env)
	if err != nil {
		return nil, err
	}
	// Credentials come from aws-sdk-go-v2's default chain; the endpoint from
	// --control-endpoint, else AWS_ENDPOINT_URL_LAMBDA_MICROVMS or AWS_ENDPOINT_URL.
	// Nothing is resolved over the network until the first mint.
	// A loopback control plane is an emulator and needs no AWS credentials.
	pf, err := platform.Open(ctx, platform.Options{Region: region, Endpoint: cplane.ConfiguredEndpoint(f.ControlEndpoint, a.Env),
		Emulator: planes.EmulatorSide(nil), Getenv: a.Env})
	if err != nil {
		return nil, err
	}
	if err := a.requireAWSCredentials(ctx, pf); err != nil {
		return nil, err
	}
	a.status = func(ctx context.Context) (sandbox.Status, error) { return pf.Handle(f.MicrovmID).Status(ctx) }
	return client.Proxied(endpoint, f.AgentToken, sandbox.ProxyMinter(pf.Control(), f.MicrovmID), client.WithAgentPort(f.Port))
}

// flagRegion is the region the flags name: --unlisted-region, else --region
// (which the parser already held to the listed set). ok is false when
// neither was given.
func (f *RegionFlags) flagRegion() (r client.Region, ok bool, err error) {
	switch {
	case f.UnlistedRegion != "":
		return client.UnlistedRegion(f.UnlistedRegion), true, nil
	case f.Region != nil:
		r, err := client.ParseRegion(*f.Region)
		return r, err == nil, err
	}
	return client.Region{}, false, nil
}

// controlRegion is the region of a control plane this invocation is about
// to call: the flags, else AWS_REGION or AWS_DEFAULT_REGION, else the
// default. The variables are read here, not by the parser, so a shell's
// AWS_REGION neither breaks a command that never calls AWS nor counts as a
// --region that conflicts with --unlisted-region; a listed region is still
// required of them, since a variable cannot say "unlisted".
func (f *RegionFlags) controlRegion(getenv func(string) string) (client.Region, error) {
	if r, ok, err := f.flagRegion(); ok || err != nil {
		return r, err
	}
	return planes.EnvRegion(getenv)
}

// shellQuote makes w one word for a POSIX shell.
func shellQuote(w string) string { return planes.ShellQuote(w) }

// HealthCmd reads the daemon's health.
type HealthCmd struct {
	AttachFlags
}

func (c *HealthCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	h, err := s.Health(ctx)
	if err != nil {
		return nil, err
	}
	if h.Bootstrapped {
		// /v1/health is open, so it answers a wrong token too. Every other
		// command would then fail with 401: ask once with the token, for an
		// exec id no one uses, where "no such exec" means the token was
		// accepted.
		_, err := s.Exec("microvm-health-token-check").Poll(ctx)
		if err != nil && !errors.Is(err, client.WireKindError(taxonomy.WireNotFound)) {
			return nil, err
		}
	}
	d := cliapi.HealthData{Version: h.Version, Bootstrapped: h.Bootstrapped, IdentityDegraded: h.IdentityDegraded,
		IdentityRepaired: h.IdentityRepaired, Busy: h.Busy, Execs: int64(h.Execs)}
	if h.Disk != nil {
		avail, press := int64(h.Disk.AvailableBytes), h.Disk.UnderPressure
		d.DiskAvailableBytes, d.DiskUnderPressure = &avail, &press
	}
	return &render.Result{Type: cliapi.TypeHealth, Data: d, Human: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "version\t%s\nbootstrapped\t%t\nbusy\t%t\nexecs\t%d\nidentity repaired\t%t\nidentity degraded\t%t\n",
			d.Version, d.Bootstrapped, d.Busy, d.Execs, d.IdentityRepaired, d.IdentityDegraded)
		if d.DiskAvailableBytes != nil {
			fmt.Fprintf(tw, "disk available\t%s\ndisk under pressure\t%t\n", render.HumanBytes(*d.DiskAvailableBytes), *d.DiskUnderPressure)
		} else {
			fmt.Fprintln(tw, "disk available\tunknown")
		}
		return tw.Flush()
	}}, nil
}

// AckCmd releases an exec's output.
type AckCmd struct {
	AttachFlags
	ExecID string `arg:"" name:"exec-id" help:"The exec whose output to release."`
}

func (c *AckCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	r, err := s.Exec(c.ExecID).Ack(ctx)
	if err != nil {
		return nil, err
	}
	d := render.ExecData(r)
	return &render.Result{Type: cliapi.TypeExec, Data: d, Human: execHuman(d)}, nil
}

// StdinCmd writes to an exec's stdin.
type StdinCmd struct {
	AttachFlags
	ExecID string  `arg:"" name:"exec-id" help:"The exec to write to; it must have been started with exec --stdin."`
	Data   *string `help:"What to write; '-' reads this process's stdin; omitted writes nothing." placeholder:"DATA"`
	EOF    bool    `name:"eof" help:"Close stdin after any --data is written."`
}

func (c *StdinCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.Data == nil && !c.EOF {
		return nil, render.InvalidArg("", "nothing to do: pass --data, --eof, or both")
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	ex := s.Exec(c.ExecID)
	var r io.Reader = strings.NewReader("")
	if c.Data != nil {
		r = strings.NewReader(*c.Data)
		if *c.Data == "-" {
			r = a.Stdin
		}
	}
	written, err := ex.CopyStdin(ctx, r, c.EOF)
	if err != nil {
		if client.KindOf(err) == taxonomy.KindInvalidArg && written == 0 {
			return nil, err
		}
		return nil, &render.Failure{Err: render.AsClientError(err), Data: cliapi.StdinData{ExecID: c.ExecID, Written: written}}
	}
	d := cliapi.StdinData{ExecID: c.ExecID, Written: written, EOF: c.EOF}
	return &render.Result{Type: cliapi.TypeStdin, Data: d, Human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: wrote %s%s\n", d.ExecID, render.HumanBytes(d.Written), map[bool]string{true: ", stdin closed"}[d.EOF])
		return err
	}}, nil
}
