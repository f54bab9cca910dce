package sandbox

import (
	"context"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Attach reaches a MicroVM that another process (or an earlier run of this
// one) launched, by its id and the agent token that launch installed
// (Sandbox.AgentToken there; `microvm run --keep` prints both). Nothing is
// re-delivered: the token is already in the VM, so Attach only reads the
// VM's state and binds a session to its endpoint. The returned Sandbox does
// everything a launched one does; its image is never deleted by its
// Terminate, because this process did not build it.
//
// A RUNNING or SUSPENDED VM attaches (Resume a suspended one before
// running anything); any other state is refused, naming it. A wrong token is
// not detected here (no request is sent to the VM to find out): the first
// call answers 401 with a hint naming the token.
func Attach(ctx context.Context, c *lambdamicrovms.Client, id, agentToken string, o Options) (*Sandbox, error) {
	if id == "" || agentToken == "" {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "Attach needs the MicroVM id and the agent token its launch installed (Sandbox.ID and Sandbox.AgentToken in the launching process)")
	}
	if o.Port == 0 {
		o.Port = taxonomy.DefaultAgentPort
	}
	o.ImageOwned = false
	s := &Sandbox{cp: c, opts: o, id: id, m: newModel(), token: agentToken}
	g, err := s.getMicrovm(ctx)
	if err != nil {
		return nil, err
	}
	switch g.State {
	case types.MicrovmStateRunning, types.MicrovmStateSuspended:
	default:
		reason := ""
		if g.StateReason != nil && *g.StateReason != "" {
			reason = " (" + *g.StateReason + ")"
		}
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "MicroVM %s is %s%s; only a RUNNING or SUSPENDED MicroVM can be attached to", id, g.State, reason)
	}
	if g.ImageArn != nil {
		if ref, err := cplane.ParseImageRef(*g.ImageArn); err == nil {
			s.ref = ref
			s.opts.Image = *g.ImageArn
		}
	}
	if g.ImageVersion != nil && s.opts.Version == "" {
		s.opts.Version = *g.ImageVersion
	}
	// The VM got past PENDING, which it does only once its run hook installed
	// the token: the model starts where the launching process left it.
	s.m.launchAccepted()
	if err := s.m.bootstrapped(); err != nil {
		return nil, err
	}
	if g.State == types.MicrovmStateSuspended {
		s.m.lifecycle = Suspended
		s.suspendedAt = s.now()
	}
	s.observeLocked(g)
	sess, err := client.Proxied(cplane.EndpointURL(s.endpoint), agentToken, ProxyMinter(c, id), s.sessionOptions(o)...)
	if err != nil {
		return nil, err
	}
	s.session = sess
	return s, nil
}
