package sse

import (
	"bytes"
	"io"
	"testing"

	"github.com/microvms/microvms/client/internal/ssetest"
	"github.com/microvms/microvms/gen/protocol"
)

// sseBody renders n output events of size bytes each, with a keepalive every
// 16 events and a final exit event: what agentd sends for a chatty child.
func sseBody(n, size int) []byte {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	var b bytes.Buffer
	var off uint64
	for i := range n {
		if i%16 == 0 {
			b.WriteString(":\n\n")
		}
		b.WriteString(ssetest.OutputFrame(off, protocol.StreamStdout, chunk))
		off += uint64(size)
	}
	b.WriteString(ssetest.ExitFrame(0, off))
	return b.Bytes()
}

func benchmarkParser(b *testing.B, size int) {
	const n = 256
	body := sseBody(n, size)
	r := bytes.NewReader(body)
	p := NewParser(r)
	var ev Event
	b.SetBytes(int64(n * size)) // decoded bytes per op, the figure a reader cares about
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.Reset(body)
		p.Reset(r)
		got := 0
		for {
			if err := p.Next(&ev); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
			got += len(ev.Out.Data)
		}
		if got != n*size {
			b.Fatalf("decoded %d bytes", got)
		}
	}
}

// BenchmarkSSEParser measures decoded bytes/s and allocations through the
// frame parser and the base64 decode, with the reader in memory.
func BenchmarkSSEParser4KiB(b *testing.B)  { benchmarkParser(b, 4<<10) }
func BenchmarkSSEParser64KiB(b *testing.B) { benchmarkParser(b, 64<<10) }
func BenchmarkSSEParser64B(b *testing.B)   { benchmarkParser(b, 64) }

// BenchmarkRawCopy64KiB is the baseline in the same run: reading the same
// number of raw bytes through a plain Read loop (no WriteTo shortcut), with no
// framing or decoding. Report the parser as a ratio of this.
func BenchmarkRawCopy64KiB(b *testing.B) {
	raw := bytes.Repeat([]byte("x"), 256*64<<10)
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for range b.N {
		r := struct{ io.Reader }{bytes.NewReader(raw)}
		for {
			if _, err := r.Read(buf); err != nil {
				break
			}
		}
	}
}
