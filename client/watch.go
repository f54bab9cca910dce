package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// WatchEvent is one event of a directory watch: a change (Gap nil) or a run
// of changes the daemon dropped because this reader fell behind (Gap set).
type WatchEvent struct {
	Change protocol.WatchEvent
	Gap    *protocol.GapEvent
}

// Watch is an open GET /v1/fs/watch. A watch does not resume: a
// broken connection ends it, and a new Watch starts from the present.
type Watch struct {
	body  io.ReadCloser
	fr    *watchFrames
	ready protocol.WatchReady
}

// Watch follows the changes under dir (every directory under it with
// recursive) and returns once the daemon's watch is in place, so a change
// made after Watch returns is reported. Close it when done; ctx ending also
// ends it.
func (s *Session) Watch(ctx context.Context, dir string, recursive bool) (*Watch, error) {
	params := protocol.FsWatchParams{Path: dir}
	if recursive {
		params.Recursive = &recursive
	}
	resp, err := s.send(ctx, call{op: protocol.OpFsWatch, file: true, path: dir, resumesItself: true,
		build: func(server string) (*http.Request, error) { return protocol.NewFsWatchRequest(server, &params) }})
	if err != nil {
		return nil, err
	}
	w := &Watch{body: resp.Body, fr: newWatchFrames(resp.Body)}
	name, data, err := w.fr.next()
	if err != nil || name != protocol.EventReady || json.Unmarshal(data, &w.ready) != nil {
		resp.Body.Close()
		if be := (*BoundError)(nil); errors.As(err, &be) {
			return nil, overBound(protocol.OpFsWatch, be, "")
		}
		if err == nil {
			err = errors.New("the first event is not ready")
		}
		return nil, WireErrorf(taxonomy.WireTransport, "%s: the watch did not start: %v", protocol.OpFsWatch, err).WithCause(err)
	}
	return w, nil
}

// Ready is the daemon's ready event: the path and how many directories it
// watches.
func (w *Watch) Ready() protocol.WatchReady { return w.ready }

// Next blocks for the next event. It returns an error once the stream ends:
// the connection broke, the context ended, or the watched directory itself
// was removed (the daemon then ends the stream after reporting it).
func (w *Watch) Next() (WatchEvent, error) {
	for {
		name, data, err := w.fr.next()
		if err != nil {
			if be := (*BoundError)(nil); errors.As(err, &be) {
				return WatchEvent{}, overBound(protocol.OpFsWatch, be, "")
			}
			return WatchEvent{}, WireErrorf(taxonomy.WireTransport, "%s: the stream ended: %v", protocol.OpFsWatch, err).WithCause(err)
		}
		switch name {
		case protocol.EventFs:
			var ev WatchEvent
			if err := json.Unmarshal(data, &ev.Change); err != nil {
				return WatchEvent{}, Errorf(taxonomy.KindProtocol, "", "%s: an fs event is not the documented JSON: %v", protocol.OpFsWatch, err)
			}
			return ev, nil
		case protocol.EventGap:
			var g protocol.GapEvent
			if err := json.Unmarshal(data, &g); err != nil || g.To < g.From {
				return WatchEvent{}, Errorf(taxonomy.KindProtocol, "", "%s: a gap event is not the documented JSON", protocol.OpFsWatch)
			}
			return WatchEvent{Gap: &g}, nil
		}
		// Any other event name is one this client does not know: skipped.
	}
}

// Close ends the watch.
func (w *Watch) Close() error { return w.body.Close() }

// watchFrames splits an SSE body into (event, data) frames. A line and an
// event's data are both bounded by MaxWatchEventBytes (a watch event is a
// path and a few numbers), so a peer cannot make the reader hold an endless
// line or gather endless data lines: past it, next returns a *BoundError.
type watchFrames struct {
	sc  *bufio.Scanner
	max int
}

const maxWatchLine = taxonomy.MaxWatchEventBytes

func newWatchFrames(r io.Reader) *watchFrames {
	return newWatchFramesMax(r, maxWatchLine)
}

func newWatchFramesMax(r io.Reader, max int) *watchFrames {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(4096, max)), max)
	return &watchFrames{sc: sc, max: max}
}

func (f *watchFrames) tooLong(what string) error {
	return &BoundError{Key: "MAX_WATCH_EVENT_BYTES", Limit: int64(f.max), What: what}
}

// next returns the next named frame; comments and nameless frames are
// skipped. A body ending mid-frame is io.ErrUnexpectedEOF.
func (f *watchFrames) next() (name string, data []byte, err error) {
	started := false
	for f.sc.Scan() {
		line := strings.TrimSuffix(f.sc.Text(), "\r")
		switch {
		case line == "":
			if name != "" {
				return name, data, nil
			}
			name, data, started = "", nil, false
		case strings.HasPrefix(line, ":"):
		default:
			started = true
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "data":
				if len(data)+1+len(value) > f.max {
					return "", nil, f.tooLong("a watch event's data")
				}
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
		}
	}
	if err := f.sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return "", nil, f.tooLong("a watch line")
		}
		return "", nil, err
	}
	if started {
		return "", nil, io.ErrUnexpectedEOF
	}
	return "", nil, io.EOF
}
