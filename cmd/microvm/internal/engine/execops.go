package engine

import (
	"context"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// execOp answers the process ops (start, poll, wait, follow, kill, signal, resize, stdin, execs) of the bound sandbox sb.
func (e *engine) execOp(ctx context.Context, sb *sandbox.Sandbox, req engineapi.Request) (string, any, error) {
	switch req.Op {
	case engineapi.OpStart:
		var args engineapi.StartArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.start(ctx, sb, args)
	case engineapi.OpPoll:
		var args engineapi.PollArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.poll(ctx, sb, args)
	case engineapi.OpWait:
		var args engineapi.WaitArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.wait(ctx, sb, args)
	case engineapi.OpFollow:
		var args engineapi.FollowArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.follow(ctx, sb, req.ID, args)
	case engineapi.OpKill:
		var args engineapi.KillArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.kill(ctx, sb, args)
	case engineapi.OpSignal:
		var args engineapi.SignalArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.signal(ctx, sb, args)
	case engineapi.OpResize:
		var args engineapi.ResizeArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.resize(ctx, sb, args)
	case engineapi.OpStdinWrite:
		var args engineapi.StdinWriteArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.stdinWrite(ctx, sb, args)
	case engineapi.OpStdinClose:
		var args engineapi.StdinCloseArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.stdinClose(ctx, sb, args)
	case engineapi.OpExecs:
		if err := decodeArgs(req.Args, &engineapi.ExecsArgs{}); err != nil {
			return "", nil, err
		}
		return e.execs(ctx, sb)
	}
	return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: unknown op %q", req.Op)
}
