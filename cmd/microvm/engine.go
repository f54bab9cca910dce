package main

import (
	"context"

	"github.com/microvms/microvms/cmd/microvm/internal/engine"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
)

// EngineCmd serves api/engine.yaml on stdin and stdout until stdin ends.
type EngineCmd struct{}

// run serves the engine (cmd/microvm/internal/engine), which calls the
// library (client/workflow, client/sandbox) itself.
func (c *EngineCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if err := engine.Serve(ctx, &a.IO); err != nil {
		return nil, err
	}
	return &render.Result{Written: true}, nil
}
