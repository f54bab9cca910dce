package emulator

import (
	"bytes"
	"testing"
)

// FuzzLineWriter feeds a step's output (guest bytes) to the line splitter
// in the chunks the fuzzer picks. Catches: a line past the bound, an event
// that does not end in a newline, bytes lost, added or reordered, and a
// byte looked at more than once.
func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("one\ntwo\n"), uint8(3), uint8(4))
	f.Add(bytes.Repeat([]byte("x"), 100), uint8(7), uint8(16))
	f.Add([]byte("\n\n\nabc"), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, out []byte, chunk, bound uint8) {
		max := int(bound%32) + 1
		step := int(chunk%64) + 1
		var got []byte
		w := &lineWriter{max: max, emit: func(p []byte) {
			if len(p) == 0 || p[len(p)-1] != '\n' {
				t.Fatalf("an event %q does not end a line", p)
			}
			for _, l := range bytes.SplitAfter(p, []byte("\n")) {
				if len(l) > max+1 {
					t.Fatalf("a %d-byte line passed the %d-byte bound", len(l)-1, max)
				}
			}
			got = append(got, p...)
		}}
		for i := 0; i < len(out); i += step {
			_, _ = w.Write(out[i:min(i+step, len(out))])
		}
		w.Flush()
		if w.scanned != int64(len(out)) {
			t.Fatalf("%d bytes written, %d looked at", len(out), w.scanned)
		}
		// Removing the newlines the cut added gives the output back: every
		// line of got is either a whole line of out or a max-byte cut.
		var back []byte
		for _, l := range bytes.SplitAfter(got, []byte("\n")) {
			if len(l) == max+1 {
				l = l[:max] // a cut (or a line exactly max long, followed by its own newline)
			}
			back = append(back, l...)
		}
		if !bytes.Equal(bytes.ReplaceAll(back, []byte("\n"), nil), bytes.ReplaceAll(out, []byte("\n"), nil)) {
			t.Fatalf("the output's bytes changed: %q became %q", out, got)
		}
	})
}
