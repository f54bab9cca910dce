package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// WatchCmd follows a guest directory's changes until --count
// changes arrived or --for passed, then reports them in one envelope.
type WatchCmd struct {
	AttachFlags
	Path      string        `arg:"" help:"The guest directory to watch."`
	Recursive bool          `short:"r" help:"Watch every directory under it too, including ones created later."`
	Count     int           `help:"Stop after this many changes; 0 means no limit (then --for is needed)." default:"0"`
	For       time.Duration `name:"for" help:"Stop after this long, e.g. 30s; 0 means no limit (then --count is needed)." default:"0s"`
}

func (c *WatchCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.Count <= 0 && c.For <= 0 {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "watch needs --count or --for, so it knows when to report")
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if c.For > 0 {
		wctx, cancel = context.WithTimeout(ctx, c.For)
	}
	defer cancel()
	w, err := s.Watch(wctx, guestPath(c.Path), c.Recursive)
	if err != nil {
		return nil, err
	}
	// Closing the body is what unblocks Next when the window ends.
	stop := context.AfterFunc(wctx, func() { _ = w.Close() })
	defer stop()
	defer w.Close()
	d := cliapi.WatchData{Path: guestPath(c.Path), Recursive: c.Recursive, Events: []cliapi.WatchEvent{}, Gaps: []cliapi.WatchGap{}}
	var lines []string
	for c.Count <= 0 || len(d.Events) < c.Count {
		ev, err := w.Next()
		if err != nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				break // --for ended the window: a normal end
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				break // the daemon ended the stream: the directory was removed
			}
			return nil, err
		}
		if len(d.Events)+len(d.Gaps) >= taxonomy.MaxWatchEvents {
			// The report is held until the window ends: a guest sending
			// changes without end must not grow it without end.
			return nil, client.OverBound(protocol.OpFsWatch, "MAX_WATCH_EVENTS", taxonomy.MaxWatchEvents, "the events gathered", "report sooner with a smaller --count or --for")
		}
		if ev.Gap != nil {
			d.Gaps = append(d.Gaps, cliapi.WatchGap{From: int64(ev.Gap.From), To: int64(ev.Gap.To)})
			lines = append(lines, fmt.Sprintf("gap\t%d changes dropped", ev.Gap.To-ev.Gap.From))
			continue
		}
		d.Events = append(d.Events, cliapi.WatchEvent{Seq: int64(ev.Change.Seq), Op: string(ev.Change.Op), Path: ev.Change.Path})
		lines = append(lines, fmt.Sprintf("%s\t%s", ev.Change.Op, ev.Change.Path))
	}
	return &render.Result{Type: cliapi.TypeWatch, Data: d, Human: func(w io.Writer) error {
		for _, l := range lines {
			if _, err := fmt.Fprintln(w, l); err != nil {
				return err
			}
		}
		return nil
	}}, nil
}
