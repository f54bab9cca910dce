package mcpserver

import (
	"io"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
)

type events []client.Event

func (e *events) Next() (client.Event, error) {
	if len(*e) == 0 {
		return client.Event{}, io.EOF
	}
	ev := (*e)[0]
	*e = (*e)[1:]
	return ev, nil
}

func out(s protocol.StreamKind, off uint64, data string) client.Event {
	return client.Event{Kind: client.EventOutput, Stream: s, Offset: off, Data: []byte(data)}
}

// One read window over both streams' one byte count. Catches: a gap's
// bytes not counted as lost (or next_offset left before it), next_offset
// advanced past the part of an event the cap cut off (those bytes would
// never be read), the cap applied to both streams together, and a read
// that goes on past the exit.
func TestReadWindow(t *testing.T) {
	evs := events{
		out(protocol.StreamStdout, 4, "ab"),
		{Kind: client.EventGap, Gap: protocol.GapEvent{From: 6, To: 10}},
		out(protocol.StreamStdout, 10, "cd"),
		out(protocol.StreamStderr, 12, "efgh"),
		out(protocol.StreamStdout, 16, "late"),
	}
	w := readWindow(&evs, 4, 3)
	if string(w.stdout) != "abc" || string(w.stderr) != "" || w.lost != 4 || w.next != 11 || !w.more || w.exit != nil || w.err != nil {
		t.Fatalf("capped window: %+v", w)
	}
	code := int32(3)
	evs = events{
		out(protocol.StreamStderr, 11, "d"),
		out(protocol.StreamStderr, 12, "ef"),
		{Kind: client.EventExit, Exit: protocol.ExitEvent{ExitCode: &code, Offset: 14}},
		out(protocol.StreamStdout, 14, "after"),
	}
	w = readWindow(&evs, 11, 3)
	if string(w.stderr) != "def" || string(w.stdout) != "" || w.next != 14 || w.more || w.exit == nil || *w.exit.ExitCode != 3 || len(evs) != 1 {
		t.Fatalf("window to the exit: %+v (left %d events)", w, len(evs))
	}
	// A stream that ends (io.EOF) before any exit is no error.
	evs = events{out(protocol.StreamStdout, 0, "x")}
	if w = readWindow(&evs, 0, 3); w.err != nil || string(w.stdout) != "x" || w.next != 1 {
		t.Fatalf("window to the stream's end: %+v", w)
	}
}
