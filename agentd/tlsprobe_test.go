package agentd

import (
	"io"
	"net"
	"strings"
	"testing"
)

// readerFromConn is a net.Conn whose ReadFrom records the call, standing in
// for the *net.TCPConn whose ReadFrom reaches sendfile.
type readerFromConn struct {
	net.Conn // nil: any other method panics, so none may be used
	got      string
	calls    int
}

func (c *readerFromConn) ReadFrom(r io.Reader) (int64, error) {
	c.calls++
	b, err := io.ReadAll(r)
	c.got += string(b)
	return int64(len(b)), err
}

// Catches: tlsProbeConn without its ReadFrom method (server.go), which hides
// the wrapped *net.TCPConn's ReadFrom from net/http so downloads are copied
// through a 32 KiB buffer instead of sendfile.
func TestTLSProbeConnPassesReadFromThrough(t *testing.T) {
	under := &readerFromConn{}
	var c net.Conn = &tlsProbeConn{Conn: under, log: quietLog}
	rf, ok := c.(io.ReaderFrom)
	if !ok {
		t.Fatal("tlsProbeConn does not expose io.ReaderFrom: sendfile is unreachable through it")
	}
	n, err := rf.ReadFrom(strings.NewReader("file body"))
	if err != nil || n != 9 {
		t.Fatalf("ReadFrom: %d %v", n, err)
	}
	if under.calls != 1 || under.got != "file body" {
		t.Fatalf("the wrapped conn's ReadFrom saw %d calls, %q", under.calls, under.got)
	}
}
