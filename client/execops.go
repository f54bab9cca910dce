package client

import (
	"context"
	"net/http"

	"github.com/microvms/microvms/gen/protocol"
)

// Signal sends one named signal (TERM, SIGTERM, HUP, ...; the closed set is
// protocol.SignalName's) to the exec's whole process group, once, without
// kill's escalation. It reports false when the group had already gone, which
// is also success. A name outside the set is refused by the daemon
// (unknown_signal). Not retried: each call sends the signal again.
func (e *Exec) Signal(ctx context.Context, name string) (bool, error) {
	params := protocol.ExecSignalParams{Signal: name}
	resp, err := e.s.send(ctx, call{op: protocol.OpExecSignal,
		build: func(server string) (*http.Request, error) {
			return protocol.NewExecSignalRequest(server, e.id, &params)
		}})
	if err != nil {
		return false, err
	}
	var out protocol.SignalResponse
	if err := decodeJSON(protocol.OpExecSignal, resp, &out); err != nil {
		return false, err
	}
	return out.Delivered, nil
}

// Signal sends a named signal to the process's exec group (see Exec.Signal).
func (p *Process) Signal(ctx context.Context, name string) (bool, error) {
	return p.e.Signal(ctx, name)
}

// Execs lists every exec the daemon holds, oldest first.
func (s *Session) Execs(ctx context.Context) ([]protocol.ExecSummary, error) {
	resp, err := s.send(ctx, call{op: protocol.OpExecList, build: protocol.NewExecListRequest})
	if err != nil {
		return nil, err
	}
	var out protocol.ExecListResponse
	return out.Execs, decodeJSON(protocol.OpExecList, resp, &out)
}

// Metrics takes one sample of the guest's CPU, memory, disk and load. CPU
// use covers the time since the previous call by anyone (since boot on the
// first), so a poller sees its own interval's figure.
func (s *Session) Metrics(ctx context.Context) (protocol.Metrics, error) {
	var out protocol.Metrics
	resp, err := s.send(ctx, call{op: protocol.OpMetrics, build: protocol.NewMetricsRequest})
	if err != nil {
		return out, err
	}
	return out, decodeJSON(protocol.OpMetrics, resp, &out)
}

// Resize sets the terminal size of an exec started with a TTY; the child's
// foreground process group gets SIGWINCH. An exec on pipes is refused
// (not_a_tty, a Conflict).
func (e *Exec) Resize(ctx context.Context, rows, cols uint16) error {
	params := protocol.ExecResizeParams{Rows: rows, Cols: cols}
	resp, err := e.s.send(ctx, call{op: protocol.OpExecResize,
		build: func(server string) (*http.Request, error) {
			return protocol.NewExecResizeRequest(server, e.id, &params)
		}})
	if err != nil {
		return err
	}
	var out protocol.ResizeResponse
	return decodeJSON(protocol.OpExecResize, resp, &out)
}
