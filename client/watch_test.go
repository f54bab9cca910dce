package client

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func FuzzWatchFrames(f *testing.F) {
	f.Add([]byte("event: ready\ndata: {}\n\n:\n\nevent: fs\nid: 1\ndata: {\"seq\":0}\n\n"))
	f.Add([]byte("event: gap\r\ndata: {\"from\":1,\"to\":3}\r\n\r\n"))
	f.Add([]byte("data: a\ndata: b\n\nevent: x\n"))
	f.Add([]byte(strings.Repeat("x", maxWatchLine+10)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := newWatchFrames(bytes.NewReader(b))
		for range len(b) + 1 {
			name, data, err := fr.next()
			if err != nil {
				return
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
