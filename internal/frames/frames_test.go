package frames

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// pieces cuts data into frames by its own bytes: each step takes a type from
// one byte and a length from the next, so the fuzzer explores every mix of
// types, empty and large payloads.
func pieces(data []byte) []Frame {
	var out []Frame
	off := uint64(0)
	for len(data) >= 2 {
		typ := data[0] % (protocol.FrameExit + 1)
		n := min(int(data[1])*37, len(data)-2)
		if typ == protocol.FrameKeepalive {
			n = 0
		}
		out = append(out, Frame{Type: typ, Offset: off, Payload: data[2 : 2+n]})
		off += uint64(n) * 3
		data = data[2+n:]
	}
	return out
}

// FuzzFrames checks the writer/reader pair both ways: whatever Append writes
// reads back identical, frame by frame, through buffers small enough that
// payloads straddle them, ending in a clean io.EOF; and arbitrary bytes fed
// to the reader never panic, never hand out a frame the format forbids, and
// end only in io.EOF, io.ErrUnexpectedEOF or ErrMalformed.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{1, 3, 'a', 'b', 'c'}, uint8(16))
	f.Add([]byte{0, 0, 2, 1, 'x', 4, 200}, uint8(0))
	f.Add(Append(Append(nil, protocol.FrameStdout, 7, []byte("hello")), protocol.FrameExit, 12, []byte(`{"offset":12}`)), uint8(200))
	f.Add(AppendHeader(nil, protocol.FrameStdout, 0, MaxPayload+1), uint8(1))
	f.Add(AppendHeader(nil, protocol.FrameKeepalive, 0, 1), uint8(1))
	f.Add([]byte{9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, bufPick uint8) {
		size := 16 + int(bufPick) // bufio's minimum is 16
		want := pieces(data)
		var body []byte
		for _, fr := range want {
			body = Append(body, fr.Type, fr.Offset, fr.Payload)
		}
		r := NewReader(bytes.NewReader(body), size)
		for i, w := range want {
			got, err := r.Next()
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if got.Type != w.Type || got.Offset != w.Offset || !bytes.Equal(got.Payload, w.Payload) {
				t.Fatalf("frame %d: got %d/%d/%q, want %d/%d/%q", i, got.Type, got.Offset, got.Payload, w.Type, w.Offset, w.Payload)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("after the last frame: %v, want io.EOF", err)
		}

		// The raw bytes as a body.
		r = NewReader(bytes.NewReader(data), size)
		for range len(data) + 1 {
			fr, err := r.Next()
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrMalformed) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if fr.Type > protocol.FrameExit || (fr.Type == protocol.FrameKeepalive && len(fr.Payload) != 0) || len(fr.Payload) > MaxPayload {
				t.Fatalf("handed out a forbidden frame %d with %d bytes", fr.Type, len(fr.Payload))
			}
		}
		t.Fatalf("more frames than bytes")
	})
}

// TestReaderRefusesWhatNoWriterSends: each case is a wrong edit to Next's
// checks (dropping the type bound, the keepalive rule, the length cap, or
// reporting a cut payload as a clean io.EOF).
func TestReaderRefusesWhatNoWriterSends(t *testing.T) {
	hdr := func(typ uint8, n uint32) []byte {
		b := []byte{typ}
		b = binary.BigEndian.AppendUint64(b, 0)
		return binary.BigEndian.AppendUint32(b, n)
	}
	cases := map[string]struct {
		body []byte
		want error
	}{
		"unknown type":              {hdr(5, 0), ErrMalformed},
		"keepalive payload":         {append(hdr(0, 1), 'x'), ErrMalformed},
		"oversized payload":         {hdr(1, MaxPayload+1), ErrMalformed},
		"cut payload":               {append(hdr(1, 10), "abc"...), io.ErrUnexpectedEOF},
		"cut header":                {hdr(1, 10)[:5], io.ErrUnexpectedEOF},
		"cut large payload":         {append(hdr(2, 100), make([]byte, 50)...), io.ErrUnexpectedEOF},
		"empty body is a clean end": {nil, io.EOF},
	}
	for name, c := range cases {
		_, err := NewReader(bytes.NewReader(c.body), 16).Next()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}
