package agentd

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// rawExchange writes req on a fresh connection to addr and reads n responses.
func rawExchange(t *testing.T, addr, req string, n int) []*http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	// Written from a goroutine: a server that answers 431 stops reading a
	// header it has refused, and the rest of it must not block the read.
	go func() { _, _ = io.WriteString(c, req) }()
	br := bufio.NewReader(c)
	var out []*http.Response
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d of %q: %v", len(out)+1, req[:min(len(req), 40)], err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, resp)
	}
	return out
}

// Catches: the responses net/http writes itself, before any handler runs
// (a malformed request line, an oversized header, an unknown protocol
// version or transfer coding, an Expect it cannot meet, a missing Host),
// leaving without the version header; and the stamp applied only to a
// connection's first request, so the same refusal after a good request on a
// kept-alive connection goes out bare (the connection must be handed back
// to net/http when it goes idle).
func TestBinaryVersionHeaderOnServerWrittenResponses(t *testing.T) {
	p := startBinary(t)
	addr := strings.TrimPrefix(p.base, "http://")
	for _, tc := range []struct {
		name  string
		req   string
		codes []int
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", []int{400}},
		{"missing Host", "GET /v1/health HTTP/1.1\r\n\r\n", []int{400}},
		{"header too large", "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20+8192) + "\r\n\r\n", []int{431}},
		{"unknown protocol version", "GET /v1/health HTTP/3.0\r\nHost: x\r\n\r\n", []int{505}},
		{"unknown transfer coding", "POST /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13\r\n\r\n", []int{501}},
		{"unmeetable Expect", "GET /v1/health HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n\r\n", []int{417}},
		{"refusal after a good request", "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n", []int{200, 400}},
		{"two good requests", "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", []int{200, 404}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, resp := range rawExchange(t, addr, tc.req, len(tc.codes)) {
				if resp.StatusCode != tc.codes[i] {
					t.Errorf("response %d: status %d, want %d", i+1, resp.StatusCode, tc.codes[i])
				}
				if got := resp.Header.Values(protocol.VersionHeader); len(got) != 1 || got[0] != binaryVersion {
					t.Errorf("response %d (%d): %s %q, want exactly %q", i+1, resp.StatusCode, protocol.VersionHeader, got, binaryVersion)
				}
			}
		})
	}
}

// recordingConn keeps what is written to it.
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (r *recordingConn) Write(p []byte) (int, error) { return r.buf.Write(p) }

// Catches: the stamp applied to writes a handler owns (a download whose
// bytes begin like a bare response head would be altered), applied to more
// than the first write net/http makes on its own, or applied twice.
func TestVersionStampTouchesOnlyServerWrittenHeads(t *testing.T) {
	head := "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	rec := &recordingConn{}
	c := &tlsProbeConn{Conn: rec}
	c.handlerOwns()
	_, _ = io.WriteString(c, head)
	if rec.buf.String() != head {
		t.Fatalf("a handler's bytes were changed: %q", rec.buf.String())
	}
	rec.buf.Reset()
	c.serverOwns()
	_, _ = io.WriteString(c, head)
	_, _ = io.WriteString(c, head)
	want := "HTTP/1.1 400 Bad Request\r\n" + protocol.VersionHeader + ": " + Version + "\r\nContent-Type"
	if got := rec.buf.String(); !strings.HasPrefix(got, want) || strings.Count(got, protocol.VersionHeader) != 1 {
		t.Fatalf("server-written head: %q", got)
	}
	stamped := "HTTP/1.1 200 OK\r\nMicrovms-Agentd-Version: 1\r\n\r\n"
	rec.buf.Reset()
	c.serverOwns()
	_, _ = io.WriteString(c, stamped)
	if rec.buf.String() != stamped {
		t.Fatalf("a head that has the header was stamped again: %q", rec.buf.String())
	}
}
