package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
)

// NetworkFlags launch a MicroVM under a network policy with secrets kept
// outside the guest (issue 48): any of them makes a policy, which denies
// everything its rules do not allow. Only a local emulator enforces one; on
// AWS the run is refused before anything is built.
type NetworkFlags struct {
	NetworkAllow []string `name:"network-allow" help:"Launch under a network policy allowing this destination, repeatable: HOST[:PORTS], *.SUFFIX[:PORTS] or CIDR[:PORTS] (PORTS comma-separated; none is 443 and 80); everything else is refused. --local only." placeholder:"RULE" sep:"none"`
	Secret       []string `help:"Bind a secret to hosts, repeatable: the guest's NAME holds a placeholder, and HTTPS requests to HOST get the value in their headers outside the guest. --local only." placeholder:"NAME=VALUE@HOST[,HOST]" sep:"none"`
	SecretEnv    []string `name:"secret-env" help:"As --secret, the value read from this process's environment variable NAME." placeholder:"NAME@HOST[,HOST]" sep:"none"`
	SecretFile   []string `name:"secret-file" help:"As --secret, the value read from the file PATH (one trailing newline dropped)." placeholder:"NAME=PATH@HOST[,HOST]" sep:"none"`
}

// network is the launch's policy, nil when no flag asked for one.
func (f NetworkFlags) network(getenv func(string) string) (*sandbox.Network, error) {
	if len(f.NetworkAllow)+len(f.Secret)+len(f.SecretEnv)+len(f.SecretFile) == 0 {
		return nil, nil
	}
	rules, err := sandbox.ParseNetworkRules(f.NetworkAllow)
	if err != nil {
		return nil, err
	}
	n := &sandbox.Network{Policy: cliapi.NetworkPolicy{Allow: rules}}
	for _, s := range f.Secret {
		sec, err := sandbox.ParseSecret(s)
		if err != nil {
			return nil, err
		}
		n.Secrets = append(n.Secrets, sec)
	}
	for _, s := range f.SecretEnv {
		sec, err := sandbox.ParseSecretEnv(s, getenv)
		if err != nil {
			return nil, err
		}
		n.Secrets = append(n.Secrets, sec)
	}
	for _, s := range f.SecretFile {
		sec, err := sandbox.ParseSecretFile(s)
		if err != nil {
			return nil, err
		}
		n.Secrets = append(n.Secrets, sec)
	}
	return n, nil
}

// NetworkCmd shows or replaces a MicroVM's network policy.
type NetworkCmd struct {
	Action    string   `arg:"" enum:"show,set" help:"show: what is in force (the policy, the secrets' bindings without their values, the refusals); set: replace the policy, closing open connections it no longer allows."`
	MicrovmID string   `arg:"" name:"microvm-id" help:"The MicroVM, launched under a policy (run --network-allow or --secret) by a local emulator."`
	Allow     []string `help:"With set: a destination the new policy allows, repeatable (as run --network-allow)." placeholder:"RULE" sep:"none"`
	DenyAll   bool     `name:"deny-all" help:"With set and no --allow: a policy that allows nothing."`
	LifecycleFlags
}

func (c *NetworkCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	var policy *cliapi.NetworkPolicy
	switch {
	case c.Action == "show" && (len(c.Allow) > 0 || c.DenyAll):
		return nil, render.InvalidArg("", "network show takes no --allow or --deny-all; network set changes the policy")
	case c.Action == "set" && len(c.Allow) > 0 && c.DenyAll:
		return nil, render.InvalidArg("", "--deny-all with --allow: a policy either allows these or nothing")
	case c.Action == "set" && len(c.Allow) == 0 && !c.DenyAll:
		return nil, render.InvalidArg("", "network set needs --allow RULE (repeatable) or --deny-all")
	case c.Action == "set":
		rules, err := sandbox.ParseNetworkRules(c.Allow)
		if err != nil {
			return nil, err
		}
		policy = &cliapi.NetworkPolicy{Allow: rules}
	}
	c.forKept(a, "", c.MicrovmID)
	if !c.Local {
		if err := sandbox.CheckNetworkEndpoint(cplane.ConfiguredEndpoint(c.ControlEndpoint, a.Env)); err != nil {
			return nil, err
		}
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	h := p.Handle(c.MicrovmID)
	if policy != nil {
		if err := h.SetNetworkPolicy(ctx, *policy); err != nil {
			return nil, err
		}
	}
	st, err := h.Network(ctx)
	if err != nil {
		return nil, err
	}
	d := cliapi.NetworkData{MicrovmID: c.MicrovmID, Network: st}
	return &render.Result{Type: cliapi.TypeNetwork, Data: d, Human: func(w io.Writer) error { return networkHuman(w, d) }}, nil
}

func networkHuman(w io.Writer, d cliapi.NetworkData) error {
	st := d.Network
	if !st.Enforced || st.Policy == nil {
		_, err := fmt.Fprintf(w, "%s has no network policy: its network is as launched\n", d.MicrovmID)
		return err
	}
	var rules []string
	for _, r := range st.Policy.Allow {
		target := ""
		if r.Host != nil {
			target = *r.Host
		} else if r.Cidr != nil {
			target = *r.Cidr
		}
		if r.Ports != nil && len(*r.Ports) > 0 {
			ps := make([]string, len(*r.Ports))
			for i, p := range *r.Ports {
				ps[i] = fmt.Sprint(p)
			}
			target += ":" + strings.Join(ps, ",")
		}
		rules = append(rules, target)
	}
	allow := "nothing"
	if len(rules) > 0 {
		allow = strings.Join(rules, " ")
	}
	fmt.Fprintf(w, "%s: policy enforced by the %s; allows %s\n", d.MicrovmID, st.Where, allow)
	for _, s := range st.Secrets {
		fmt.Fprintf(w, "secret %s (placeholder %s) bound to %s\n", s.Name, s.Placeholder, strings.Join(s.Hosts, ","))
	}
	fmt.Fprintf(w, "refused: %d\n", st.DeniedCount)
	for _, x := range st.Denied {
		fmt.Fprintf(w, "  %s %s %s:%d %s\n", x.At, x.Proto, x.Host, x.Port, x.Why)
	}
	return nil
}
