package sse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
)

// parseAll decodes every event of body through p, copying each output's
// data (it is only valid until the next event), and the final error.
func parseAll(p *Parser) ([]Event, error) {
	var evs []Event
	var ev Event
	for {
		if err := p.Next(&ev); err != nil {
			return evs, err
		}
		ev.Out.Data = bytes.Clone(ev.Out.Data)
		evs = append(evs, ev)
	}
}

// TestSSEParserSplitReads checks that frames parsed in place in the reader's
// buffer and frames assembled across refills (or from lines longer than the
// buffer) decode alike, however the body's reads are split.
func TestSSEParserSplitReads(t *testing.T) {
	var b strings.Builder
	var off uint64
	for i, size := range []int{0, 1, 2, 3, 5, 16, 17, 40, 100, 1000, 3} {
		chunk := bytes.Repeat([]byte{byte(i), 0xfe, '"', '\n'}, size)[:size]
		stream := protocol.StreamStdout
		if i%2 == 1 {
			stream = protocol.StreamStderr
		}
		frame := ssetest.OutputFrame(off, stream, chunk)
		switch i % 4 {
		case 1:
			frame = strings.ReplaceAll(frame, "\n", "\r\n")
		case 2: // agentd's key order: output last
			frame = fmt.Sprintf("event: output\ndata: {\"offset\":%d,\"stream\":%q,\"output\":%q}\n\n", off, stream, strings.Split(frame, "\"")[5])
		case 3:
			frame = ": keepalive\n\nevent: other\ndata: x\n\n" + frame
		}
		b.WriteString(frame)
		off += uint64(size)
		if i == 4 {
			b.WriteString(ssetest.GapFrame(off, off+7))
			off += 7
		}
	}
	b.WriteString("event: gap\ndata: {\"from\":1,\ndata: \"to\":2}\nid: 9\n\n")
	b.WriteString(ssetest.ExitFrame(3, off))
	body := b.String()

	want, werr := parseAll(NewParser(strings.NewReader(body)))
	if werr != io.EOF || len(want) != 14 {
		t.Fatalf("reference parse: %d events, %v", len(want), werr)
	}
	readers := map[string]func() io.Reader{
		"one-byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) },
		"half":     func() io.Reader { return iotest.HalfReader(strings.NewReader(body)) },
		"data-err": func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) },
	}
	for name, r := range readers {
		for _, size := range []int{16, 31, 64, 100, 1 << 10, BufferSize} {
			p := &Parser{r: bufio.NewReaderSize(r(), size)}
			got, err := parseAll(p)
			if err != werr || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s reads, %d-byte buffer: %d events, %v; want %d, %v", name, size, len(got), err, len(want), werr)
			}
		}
	}
	// Cut anywhere, the body parses the same in place as assembled a byte
	// at a time, up to the same clean or unclean end.
	for cut := range len(body) {
		want, werr := parseAll(NewParser(strings.NewReader(body[:cut])))
		got, err := parseAll(&Parser{r: bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(body[:cut])), 16)})
		if err != werr || !reflect.DeepEqual(got, want) || (err != io.EOF && err != io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d (%q): %d events, %v; in place %d, %v", cut, body[max(0, cut-10):cut], len(got), err, len(want), werr)
		}
	}
}

// Catches: agentd's id lines (written before the data line, so a frame still
// ends with its one data line) pushing every frame off the in-place path onto
// the copying one, which allocates and copies each event; and an id line
// being mistaken for data.
func TestSSEParserReadsFramesWithIDsInPlace(t *testing.T) {
	body := sseBody(64, 1000)
	if !bytes.Contains(body, []byte("\nid: 1000\ndata: ")) {
		t.Fatal("the test body does not carry agentd's id lines")
	}
	r := bytes.NewReader(body)
	p := NewParser(r)
	var ev Event
	parse := func() {
		r.Reset(body)
		p.Reset(r)
		for n := 0; ; n++ {
			err := p.Next(&ev)
			if err == io.EOF {
				if n != 65 {
					t.Fatalf("%d events, want 65", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == Output && (len(ev.Out.Data) != 1000 || ev.Out.Offset != uint64(n*1000)) {
				t.Fatalf("event %d: offset %d, %d bytes", n, ev.Out.Offset, len(ev.Out.Data))
			}
		}
	}
	parse()
	if cap(p.data) != 0 {
		t.Fatalf("a frame's data was assembled in the copy buffer (%d bytes of capacity): frames with id lines are not parsed in place", cap(p.data))
	}
	if allocs := testing.AllocsPerRun(20, parse); allocs > 8 {
		t.Fatalf("%v allocations per body of 65 frames: parsing allocates per frame", allocs)
	}
}
