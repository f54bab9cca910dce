package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A sandbox's network policy through MCP (issue 48). A secret's value
// never passes through the caller, which is a model reading text an
// attacker may have written: sandbox_create names the server's own
// environment variable, and the answers carry only placeholders.

// launchNetwork is the policy sandbox_create or sandbox_fork asks for; nil
// when it asks for none.
func (s *mcpServer) launchNetwork(allow []string, denyAll bool, secretsFromEnv []string) (*sandbox.Network, error) {
	if len(allow) == 0 && !denyAll && len(secretsFromEnv) == 0 {
		return nil, nil
	}
	if denyAll && len(allow) > 0 {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "network_deny_all with network_allow: a policy either allows these or nothing")
	}
	rules, err := sandbox.ParseNetworkRules(allow)
	if err != nil {
		return nil, err
	}
	n := &sandbox.Network{Policy: cliapi.NetworkPolicy{Allow: rules}}
	for _, spec := range secretsFromEnv {
		sec, err := sandbox.ParseSecretEnv(spec, s.p.Getenv)
		if err != nil {
			return nil, err
		}
		n.Secrets = append(n.Secrets, sec)
	}
	return n, nil
}

func (s *mcpServer) networkShow(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxNetworkShowArgs) (mcpapi.SandboxNetworkShowResult, string, error) {
	b, err := st.box(in.SandboxID)
	if err != nil {
		return mcpapi.SandboxNetworkShowResult{}, "", err
	}
	n, err := b.sb.Network(ctx)
	if err != nil {
		return mcpapi.SandboxNetworkShowResult{}, "", err
	}
	return mcpapi.SandboxNetworkShowResult{SandboxID: b.sb.ID(), Network: n}, networkText(b.sb.ID(), n), nil
}

func (s *mcpServer) networkSet(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxNetworkSetArgs) (mcpapi.SandboxNetworkSetResult, string, error) {
	var out mcpapi.SandboxNetworkSetResult
	switch {
	case len(in.Allow) > 0 && in.DenyAll:
		return out, "", client.Errorf(taxonomy.KindInvalidArg, "", "deny_all with allow: a policy either allows these or nothing")
	case len(in.Allow) == 0 && !in.DenyAll:
		return out, "", client.Errorf(taxonomy.KindInvalidArg, "", "sandbox_network_set needs allow rules or deny_all, so an empty list never cuts the network by mistake")
	}
	rules, err := sandbox.ParseNetworkRules(in.Allow)
	if err != nil {
		return out, "", err
	}
	b, err := st.box(in.SandboxID)
	if err != nil {
		return out, "", err
	}
	if err := b.sb.SetNetworkPolicy(ctx, cliapi.NetworkPolicy{Allow: rules}); err != nil {
		return out, "", err
	}
	n, err := b.sb.Network(ctx)
	if err != nil {
		return out, "", err
	}
	return mcpapi.SandboxNetworkSetResult{SandboxID: b.sb.ID(), Network: n}, networkText(b.sb.ID(), n), nil
}

// networkText is the answer's text for a model: what is allowed and what
// was refused.
func networkText(id string, n cliapi.NetworkState) string {
	if !n.Enforced || n.Policy == nil {
		return fmt.Sprintf("sandbox %s has no network policy: its network is as launched", id)
	}
	var allow []string
	for _, r := range n.Policy.Allow {
		switch {
		case r.Host != nil:
			allow = append(allow, *r.Host)
		case r.Cidr != nil:
			allow = append(allow, *r.Cidr)
		}
	}
	what := "nothing"
	if len(allow) > 0 {
		what = strings.Join(allow, ", ")
	}
	return fmt.Sprintf("sandbox %s allows %s; %d connections refused", id, what, n.DeniedCount)
}
