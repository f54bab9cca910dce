package sse

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
)

// A body that ends inside a line is cut, whatever line it is: here the
// first line of the next frame. Catches readLine's `err == io.EOF` negated
// (the partial line read as a clean end, so a cut stream looks finished).
func TestSSEPartialLineAtTheEndIsACut(t *testing.T) {
	body := ssetest.OutputFrame(0, protocol.StreamStdout, []byte("hi")) + "event: exi"
	evs, err := parseAll(NewParser(strings.NewReader(body)))
	if len(evs) != 1 || err != io.ErrUnexpectedEOF {
		t.Fatalf("%d events then %v, want 1 then io.ErrUnexpectedEOF", len(evs), err)
	}
}

// A frame whose lines all arrived but whose blank line did not is cut too.
// Catches nextFrame's `err == io.EOF` negated (the half frame read as a
// clean end).
func TestSSEFrameWithoutItsBlankLineIsACut(t *testing.T) {
	body := ssetest.OutputFrame(0, protocol.StreamStdout, []byte("hi")) + strings.TrimSuffix(ssetest.ExitFrame(0, 2), "\n")
	evs, err := parseAll(NewParser(strings.NewReader(body)))
	if len(evs) != 1 || err != io.ErrUnexpectedEOF {
		t.Fatalf("%d events then %v, want 1 then io.ErrUnexpectedEOF", len(evs), err)
	}
}

// A field with nothing after its colon is a field with an empty value (the
// SSE grammar allows it; an "id:" line resets the id). Catches the
// leading-space test made `len(value) >= 0`, which indexes an empty value.
func TestSSEEmptyFieldValue(t *testing.T) {
	frame := ssetest.OutputFrame(0, protocol.StreamStdout, []byte("hi"))
	body := strings.Replace(frame, "data:", "id:\ndata:", 1)
	evs, err := parseAll(NewParser(strings.NewReader(body)))
	if len(evs) != 1 || string(evs[0].Out.Data) != "hi" || err != io.EOF {
		t.Fatalf("%+v then %v", evs, err)
	}
}

// Only a gap that ends before it starts is malformed; an empty one
// ([n, n), nothing lost) is read as it is. Catches the check made
// `To <= From`.
func TestSSEEmptyGapIsNotMalformed(t *testing.T) {
	evs, err := parseAll(NewParser(strings.NewReader(ssetest.GapFrame(5, 5) + ssetest.GapFrame(7, 6))))
	if len(evs) != 1 || evs[0].Kind != Gap || evs[0].Gap.From != 5 || evs[0].Gap.To != 5 || !errors.Is(err, ErrMalformed) {
		t.Fatalf("%+v then %v; want the empty gap, then the backwards one refused", evs, err)
	}
}

// scanOutput, the fast path for output payloads, on bytes that end early
// and on the largest offset. Each short input is declined (the slow path
// then judges it), never read past its end; the largest uint64 offset is
// taken, and one more is declined. Catches the end-of-input tests made
// `i > len(b)` (at the start, after '{', after a key, before the stream's
// or the output's string) or `i <= len(b)` in the digit loop, each of which reads b[len(b)], and the overflow guard
// made `>=` or computed as `1<<64-1+d` (the fast path gives up on offsets
// it can hold).
func TestScanOutputEdges(t *testing.T) {
	for _, in := range []string{"", "{", `{"offset"`, `{"offset":12`, `{"offset":1,"stream":`, `{"offset":1,"output":`} {
		if _, _, _, ok := scanOutput([]byte(in)); ok {
			t.Errorf("%q taken", in)
		}
	}
	off, stream, b64, ok := scanOutput([]byte(`{"offset":18446744073709551615,"stream":"stdout","output":"aGk="}`))
	if !ok || off != 1<<64-1 || stream != protocol.StreamStdout || string(b64) != "aGk=" {
		t.Fatalf("the largest offset: %d %q %q %v", off, stream, b64, ok)
	}
	if _, _, _, ok := scanOutput([]byte(`{"offset":18446744073709551616,"stream":"stdout","output":"aGk="}`)); ok {
		t.Fatal("an offset past uint64 taken")
	}
	// Whitespace around the tokens, leading whitespace included, is skipped.
	// Catches skipWS's `i++` made `i--` (it walks back off the slice's start).
	if off, _, b64, ok := scanOutput([]byte(" { \"offset\" : 7 ,\t\"stream\":\"stderr\",\"output\":\"aGk=\" } ")); !ok || off != 7 || string(b64) != "aGk=" {
		t.Fatalf("spaced payload: %d %q %v", off, b64, ok)
	}
}
