package client

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func FuzzWatchFrames(f *testing.F) {
	f.Add([]byte("event: ready\ndata: {}\n\n:\n\nevent: fs\nid: 1\ndata: {\"seq\":0}\n\n"))
	f.Add([]byte("event: gap\r\ndata: {\"from\":1,\"to\":3}\r\n\r\n"))
	f.Add([]byte("data: a\ndata: b\n\nevent: x\n"))
	f.Add([]byte(strings.Repeat("x", maxWatchLine+10)))
	f.Add([]byte("event: fs\n" + strings.Repeat("data: xxxx\n", 40)))
	f.Fuzz(func(t *testing.T, b []byte) {
		// A small bound the fuzzer reaches: no frame's data passes it, and
		// passing it (in one line or gathered) is a *BoundError.
		const max = 128
		fr := newWatchFramesMax(bytes.NewReader(b), max)
		for range len(b) + 1 {
			name, data, err := fr.next()
			if err != nil {
				var be *BoundError
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &be) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(data) > max {
				t.Fatalf("%d data bytes passed the %d-byte bound", len(data), max)
			}
			if name == "" {
				t.Fatal("a frame without a name was returned")
			}
			if len(data) > len(b) {
				t.Fatalf("data of %d bytes from %d input bytes", len(data), len(b))
			}
		}
		if _, _, err := fr.next(); err == nil {
			t.Fatal("more frames than input bytes")
		}
	})
}

// A body cut mid-frame is not a clean end. Wrong edit caught: returning the
// partial frame, which would report a change the daemon never finished
// sending.
func TestWatchFramesCutMidFrame(t *testing.T) {
	fr := newWatchFrames(strings.NewReader("event: fs\ndata: {\"seq\":0"))
	if _, _, err := fr.next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
}
