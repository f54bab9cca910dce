package main

import (
	"context"

	"github.com/microvms/microvms/cmd/microvm/internal/mcpserver"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
)

// McpCmd serves the tools of api/mcp.yaml until its client goes (stdio) or
// it is interrupted.
type McpCmd struct {
	HTTP             string `name:"http" help:"Serve streamable HTTP at http://ADDR/mcp instead of stdio; ADDR is host:port on loopback unless --allow-remote." placeholder:"ADDR"`
	AllowRemote      bool   `name:"allow-remote" help:"Let --http listen on a non-loopback address. Anyone who reaches it can run commands in sandboxes this server pays for; put authentication in front."`
	Image            string `help:"The image sandbox_create launches when a call names none (AWS or a control endpoint): its ARN or name." env:"MICROVM_IMAGE" placeholder:"IDENTIFIER"`
	ExecutionRoleARN string `name:"execution-role-arn" help:"IAM role the MicroVMs run as (AWS)." env:"MICROVM_EXECUTION_ROLE_ARN" placeholder:"ARN"`
	LifecycleFlags
}

// run opens the plane and hands it to the server (cmd/microvm/internal/mcpserver),
// which calls the library's image steps itself.
func (c *McpCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.HTTP != "" {
		if err := mcpserver.CheckListen(c.HTTP, c.AllowRemote); err != nil {
			return nil, err
		}
	}
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	plane := mcpserver.Plane{Platform: p.Platform, Local: p.emu, Agentd: c.Agentd, Getenv: a.Env}
	err = mcpserver.Serve(ctx, mcpserver.Options{Plane: plane, Image: c.Image, Role: c.ExecutionRoleARN, Version: version,
		HTTP: c.HTTP, Stdin: a.Stdin, Stdout: a.Stdout, Stderr: a.Stderr})
	if err != nil {
		return nil, err
	}
	return &render.Result{Written: true}, nil
}
