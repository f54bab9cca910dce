package imagebuild

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

// Catches: a line splitter that looks at the pending line again for every
// chunk (quadratic in a line's length: 16/32/64 MiB without a newline took
// 1.6/4.2/17 s), one that holds a line without bound, and one that loses or
// adds bytes. It counts the bytes looked at, not the time taken.
func TestStepOutputIsScannedOnce(t *testing.T) {
	const bound = 16 << 10
	var emitted, longest int
	var lines int
	w := &lineWriter{max: bound, emit: func(p []byte) {
		emitted += len(p)
		for _, l := range bytes.SplitAfter(p, []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			if l[len(l)-1] != '\n' {
				t.Fatalf("an event holds a line without its newline: %q...", l[:min(len(l), 40)])
			}
			lines++
			longest = max(longest, len(l)-1)
		}
	}}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	written := 0
	for written < 64<<20 {
		_, _ = w.Write(chunk)
		written += len(chunk)
	}
	_, _ = w.Write([]byte("tail"))
	written += 4
	w.Flush()
	if w.scanned != int64(written) {
		t.Fatalf("%d bytes written, %d looked at: each byte must be looked at once", written, w.scanned)
	}
	if longest > bound {
		t.Fatalf("a %d-byte line passed the %d-byte bound", longest, bound)
	}
	if emitted != written+lines {
		t.Fatalf("%d bytes written into %d lines, %d handed on", written, lines, emitted)
	}
	if cap(w.partial) > 2*bound {
		t.Fatalf("the writer holds %d bytes for a line bounded at %d", cap(w.partial), bound)
	}
}
