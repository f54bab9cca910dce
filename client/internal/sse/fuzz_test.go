package sse

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/microvms/microvms/client/internal/b64"
	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
)

// fastBase64 is the fast path's test of the output scanOutput found: it is
// taken only when b64Decode accepts it (valid base64, no CR or LF).
func fastBase64(b []byte) bool {
	_, err := b64.Decode(make([]byte, base64.StdEncoding.DecodedLen(len(b))), b)
	return err == nil
}

// The fuzz targets' bounds: small, so a few hundred bytes reach them.
const fuzzMaxLine, fuzzMaxEvent = 300, 500

// FuzzSSEParser feeds arbitrary bytes to the frame parser. It must never
// panic, every output event it returns must decode to bytes, and whenever the
// allocation-free fast path accepts a payload, encoding/json must read the
// same offset, stream and base64 from it (a differential check of scanOutput).
func FuzzSSEParser(f *testing.F) {
	seeds := []string{
		ssetest.OutputFrame(0, protocol.StreamStdout, []byte("hello")),
		ssetest.OutputFrame(5, protocol.StreamStderr, []byte{0, 1, 2, 255}) + ssetest.GapFrame(9, 100) + ssetest.ExitFrame(1, 100),
		": keepalive\n\n" + "event: exit\ndata: {\"exit_code\":null,\"signal\":9,\"truncated\":false,\"writers_may_be_alive\":true,\"offset\":0}\n\n",
		"event: output\r\ndata: {\"offset\":1,\"stream\":\"stdout\",\"output\":\"aGk=\"}\r\n\r\n",
		"event: output\ndata: {\"output\":\"aGk=\", \"stream\" : \"stderr\",\"offset\":18446744073709551615}\n\n",
		"event: output\ndata: {\"offset\":1,\"stream\":\"stdout\",\"output\":\"a\\/k=\"}\n\n",
		"event: output\ndata: {\"offset\":01,\"stream\":\"stdout\",\"output\":\"\"}\n\n",
		"event: output\ndata: {\"offset\":1,\"stream\":\"stdin\",\"output\":\"\"}\n\n",
		"event: unknown\ndata: x\n\nevent: gap\ndata: {\"from\":3,\"to\":1}\n\n",
		"event: output\ndata: {\"offset\":1,\ndata: \"stream\":\"stdout\",\"output\":\"aGk=\"}\n\n",
		"event: output\ndata: {\"offset\":1,\"stream\":\"stdout\",\"output\":\"!!\"}\n\n",
		"event: output\ndata: {\"offset\":1,\"stream\":\"stdout\",\"output\":\"aGk=\"",
		"data: only\n\n:comment\nevent\n\nevent:exit\ndata:{}\n\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte("event: output\ndata: " + strings.Repeat("A", fuzzMaxLine+1) + "\n\n"))
	f.Add([]byte("event: output\n" + strings.Repeat("data: AAAA\n", fuzzMaxEvent/5)))
	f.Fuzz(func(t *testing.T, in []byte) {
		p := NewParser(bytes.NewReader(in))
		// Small bounds, so the fuzzer reaches them: no line or event's data
		// handed out may pass them, and passing them is a *LimitError.
		p.MaxLine, p.MaxEvent = fuzzMaxLine, fuzzMaxEvent
		var ev Event
		for range 10000 {
			kind, data, err := p.nextFrame()
			if err != nil {
				var le *LimitError
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &le) {
					t.Fatalf("unexpected error type %v", err)
				}
				break
			}
			if len(data) > fuzzMaxEvent {
				t.Fatalf("an event of %d data bytes passed MaxEvent %d", len(data), fuzzMaxEvent)
			}
			if kind == Output {
				if off, stream, b64, ok := scanOutput(data); ok && fastBase64(b64) {
					var o protocol.OutputEvent
					if err := json.Unmarshal(data, &o); err != nil {
						t.Fatalf("fast path accepted %q, json refused: %v", data, err)
					}
					if o.Offset != off || o.Stream != stream || o.Output != string(b64) {
						t.Fatalf("fast path read %d %q %q, json read %d %q %q from %q", off, stream, b64, o.Offset, o.Stream, o.Output, data)
					}
				}
			}
		}
		// The full decoder over the same bytes: no panic, and decoded output
		// is exactly base64 of what the payload said.
		p = NewParser(bytes.NewReader(in))
		p.MaxLine, p.MaxEvent = fuzzMaxLine, fuzzMaxEvent
		for range 10000 {
			if err := p.Next(&ev); err != nil {
				break
			}
			if ev.Kind == Output {
				if ev.Out.Stream != protocol.StreamStdout && ev.Out.Stream != protocol.StreamStderr {
					t.Fatalf("stream %q delivered", ev.Out.Stream)
				}
				_ = strings.Clone(base64.StdEncoding.EncodeToString(ev.Out.Data))
			}
		}
	})
}
