package client

import (
	"bytes"
	"errors"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a frame decoder that panics on hostile guest bytes, that reads a
// binary frame as anything but the terminal's bytes, that takes a resize to
// 0 rows or columns (agentd and terminals refuse it), that drops an unknown
// text frame instead of typing it (the measured behaviour), or that takes a
// frame over the bound.
func FuzzDecodeShellFrame(f *testing.F) {
	f.Add(true, []byte(`{"type":"session_init","session_id":"5b7e"}`))
	f.Add(true, []byte(`{"type":"resize","cols":120,"rows":40}`))
	f.Add(true, []byte(`{"type":"resize","cols":0,"rows":40}`))
	f.Add(true, []byte(`{"type":"window_size","cols":1}`))
	f.Add(false, []byte("echo hi\n\x03"))
	f.Fuzz(func(t *testing.T, text bool, b []byte) {
		fr, err := DecodeShellFrame(text, b)
		if err != nil {
			return
		}
		switch {
		case !text && !bytes.Equal(fr.Data, b):
			t.Fatalf("binary frame %q decoded as %+v", b, fr)
		case fr.Control == taxonomy.ShellResize && (fr.Rows == 0 || fr.Cols == 0):
			t.Fatalf("resize to %dx%d accepted", fr.Rows, fr.Cols)
		case fr.Control == "" && !bytes.Equal(fr.Data, b):
			t.Fatalf("text frame %q typed as %q", b, fr.Data)
		}
	})
}

func TestDecodeShellFrameHoldsItsBound(t *testing.T) {
	big := make([]byte, taxonomy.MaxShellFrameBytes+1)
	if _, err := DecodeShellFrame(false, big); !errors.Is(err, errShellFrameTooLong) {
		t.Fatalf("a frame of %d bytes: %v", len(big), err)
	}
	if f, err := DecodeShellFrame(true, ShellResizeFrame(40, 120)); err != nil || f.Rows != 40 || f.Cols != 120 {
		t.Fatalf("our own resize frame: %+v %v", f, err)
	}
}
