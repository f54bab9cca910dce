package agentd

import (
	"bytes"
	"fmt"
	"io"
	"net/textproto"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// eventBytes is the size of the output event ExecStream builds for d bytes
// at offset off, built by the same code.
func eventBytes(off uint64, d int) int {
	var b streamBuffers
	b.output(off, stdoutKind, make([]byte, d))
	return len(b.out)
}

// exactFit finds a start offset and an output length for which a stream from
// that offset buffers output events totalling exactly limit bytes, every
// event but the last a full maxEventBytes.
func exactFit(t *testing.T, limit int) (from, total uint64) {
	t.Helper()
	// The first event's offset has one to five digits; one of them makes the
	// events' lengths, multiples of four apart in their base64, reach limit.
	for _, from := range []uint64{0, 10, 100, 1000, 10000} {
		off, sum := from, 0
		for sum+eventBytes(off, 1) <= limit {
			need := limit - sum
			d := sort.Search(maxEventBytes+1, func(d int) bool { return d > 0 && eventBytes(off, d) >= need })
			if d <= maxEventBytes && eventBytes(off, d) == need {
				return from, off + uint64(d)
			}
			sum += eventBytes(off, maxEventBytes)
			off += maxEventBytes
		}
	}
	t.Fatalf("no output length fills exactly %d bytes of events", limit)
	return 0, 0
}

// streamChunks reads GET /v1/exec/{id}/stream from offset on a raw
// connection and returns the body's HTTP chunks as the server wrote them.
func streamChunks(t *testing.T, d *daemon, id string, from uint64) [][]byte {
	t.Helper()
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "GET /v1/exec/%s/stream?offset=%d HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", id, from, testToken)
	tp := textproto.NewReader(br)
	status, err := tp.ReadLine()
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200 ") {
		t.Fatalf("stream status line %q: %v", status, err)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil || hdr.Get("Transfer-Encoding") != "chunked" {
		t.Fatalf("stream headers %v: %v, want a chunked body", hdr, err)
	}
	var chunks [][]byte
	for range 1000 {
		line, err := tp.ReadLine()
		if err != nil {
			t.Fatalf("chunk size line: %v", err)
		}
		n, err := strconv.ParseUint(line, 16, 32)
		if err != nil {
			t.Fatalf("chunk size line %q: %v", line, err)
		}
		if n == 0 {
			return chunks
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(br, chunk); err != nil || !bytes.HasSuffix(chunk, []byte("\r\n")) {
			t.Fatalf("chunk of %d bytes: %v", n, err)
		}
		chunks = append(chunks, chunk[:n])
	}
	t.Fatal("more than 1000 chunks")
	return nil
}

// An attached stream hands its buffer to the connection (one write, one HTTP
// chunk) only when the buffer cannot take another full event, or at the end;
// a buffer that can is never written early, and no write is larger than
// streamBufferBytes. The chunks are read off the wire of a stream replayed
// from a finished exec, so no wait in between adds a write. After a stream
// whose buffer grew to its full size, that buffer is back in the pool for the
// next attach.
//
// Catches, in ExecStream: the flush test
// `len(buf.out)+eventFrameBytes > streamBufferBytes` made `>=` (a buffer
// holding exactly streamBufferBytes-eventFrameBytes is written before the
// exit event, which then goes alone), made `<=` (every event is written on
// its own), or `+eventFrameBytes` made `-eventFrameBytes` (writes grow past
// streamBufferBytes); and the pool's `cap(buf.out) > streamBufferBytes` made
// `>=` or `<=` (a full-size buffer is dropped instead of kept).
func TestStreamWritesWholeBuffersAndPoolsThem(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamReplayBytes = 4 << 20 })

	// Buffered events that leave exactly room for one full event: the
	// buffer still takes the exit event, and the whole stream is one chunk.
	from, total := exactFit(t, streamBufferBytes-eventFrameBytes)
	d.mustStart(shell("fit", fmt.Sprintf("head -c %d /dev/zero", total)))
	d.waitExited("fit")
	chunks := streamChunks(t, d, "fit", from)
	body := bytes.Join(chunks, nil)
	out, gaps, exit := collect(t, readSSE(t, bytes.NewReader(body)), from)
	if uint64(len(out)) != total-from || len(gaps) != 0 || exit == nil || exit.Offset != total {
		t.Fatalf("stream from %d: %d bytes, gaps %v, exit %+v; want %d bytes and the exit at %d", from, len(out), gaps, exit, total-from, total)
	}
	if len(chunks) != 1 {
		sizes := make([]int, len(chunks))
		for i, c := range chunks {
			sizes[i] = len(c)
		}
		t.Fatalf("a stream whose events leave room for exactly one more full event came in chunks of %v bytes, want one chunk of %d", sizes, len(body))
	}

	// A backlog of several buffers: each chunk but the last is a buffer
	// that could not take another full event, and none exceeds
	// streamBufferBytes. GOMAXPROCS 1 and no GC for the rest of the test,
	// so the buffer this stream returns to the pool is the one this
	// goroutine finds there.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const backlog = 3 << 20
	d.mustStart(shell("backlog", fmt.Sprintf("head -c %d /dev/zero", backlog)))
	d.waitExited("backlog")
	chunks = streamChunks(t, d, "backlog", 0)
	out, gaps, exit = collect(t, readSSE(t, bytes.NewReader(bytes.Join(chunks, nil))), 0)
	if len(out) != backlog || len(gaps) != 0 || exit == nil {
		t.Fatalf("backlog stream: %d bytes, gaps %v, exit %+v; want %d bytes and the exit", len(out), gaps, exit, backlog)
	}
	if len(chunks) < 2 {
		t.Fatalf("a %d-byte backlog came in %d chunk(s)", backlog, len(chunks))
	}
	for i, c := range chunks {
		if len(c) > streamBufferBytes {
			t.Fatalf("chunk %d of %d is %d bytes, more than streamBufferBytes (%d)", i, len(chunks), len(c), streamBufferBytes)
		}
		if i < len(chunks)-1 && len(c)+eventFrameBytes <= streamBufferBytes {
			t.Fatalf("chunk %d of %d is %d bytes: written while the buffer still had room for a full event (%d of %d)", i, len(chunks), len(c), eventFrameBytes, streamBufferBytes)
		}
	}

	var got []*streamBuffers
	defer func() {
		for _, b := range got {
			streamPool.Put(b)
		}
	}()
	for range 16 {
		b := streamPool.Get().(*streamBuffers)
		got = append(got, b)
		if cap(b.out) == streamBufferBytes {
			return
		}
	}
	t.Fatalf("after a stream that filled its %d-byte buffer, the pool holds no buffer of that size", streamBufferBytes)
}
