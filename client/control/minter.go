package control

import (
	"context"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ProxyMinter is the client.TokenMinter of a proxied session with the
// MicroVM microvmID: each mint is one CreateMicrovmAuthToken for exactly the
// ports and minutes the session asks for. The returned token is the header
// map without X-aws-proxy-port, since the session names the port on each
// request (ConnectHeaders may name a port other than the agent's).
// Nothing is sent until the session's first request needs a token.
func (c *Client) ProxyMinter(microvmID string) client.TokenMinter {
	return client.TokenMinterFunc(func(ctx context.Context, req client.MintRequest) (client.ProxyToken, error) {
		scopes := make([]PortScope, 0, len(req.Ports))
		for _, p := range req.Ports {
			scopes = append(scopes, Port(p))
		}
		tok, err := c.MintAuthToken(ctx, microvmID, TokenRequest{Ports: scopes, Expiry: time.Duration(req.Minutes) * time.Minute})
		if err != nil {
			return client.ProxyToken{}, err
		}
		// MintAuthToken refused an empty port list. Headers checks the scope
		// covers a port; every asked-for port is in it, so the first one
		// stands for them all.
		h, err := tok.Headers(req.Ports[0])
		if err != nil {
			return client.ProxyToken{}, err
		}
		delete(h, taxonomy.ProxyPortHeader)
		return client.NewProxyToken(h), nil
	})
}
