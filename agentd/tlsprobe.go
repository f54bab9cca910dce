package agentd

// The platform probes the agent port with TLS before bootstrap (finding
// tls-probe): the listener answers a TLS handshake on the plain port with a
// plain HTTP 400 at once instead of letting it hang, stamps the version
// header on every answer, and carries each connection's slot of the
// connection bound.

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// tlsProbeListener answers raw TLS handshake bytes on the plain port with a
// 400. Something in the platform's path probes the port with TLS first; left
// to net/http, a ClientHello has no newline to end a request line, so the
// probe would hang until a timeout instead of being told.
type tlsProbeListener struct {
	net.Listener
	log *slog.Logger
	// table bounds the connections held open (limits.max_connections); nil
	// holds any number.
	table *connTable
}

func (l *tlsProbeListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		pc := &tlsProbeConn{Conn: c, log: l.log, table: l.table}
		if l.table == nil {
			return pc, nil
		}
		slot, ok := l.table.admit(c.Close)
		if !ok {
			// Every held connection is inside a handler: this one waits for
			// nothing and is closed at once, so the accept loop never stalls.
			l.log.Debug("connection bound full, every connection busy; closing the newcomer", "max_connections", l.table.bound)
			_ = c.Close()
			continue
		}
		pc.slot = slot
		return pc, nil
	}
}

// tlsHandshakeRecord is the TLS record type of a handshake (RFC 8446 §5.1); no
// HTTP/1 method starts with it.
const tlsHandshakeRecord = 0x16

type tlsProbeConn struct {
	net.Conn
	log     *slog.Logger
	checked atomic.Bool
	// handled is false while net/http itself may answer on this connection:
	// from accept, or from the end of a response (StateIdle), until a
	// handler starts. What it writes then is a response of its own (400 for
	// a malformed request, 431, 501, 505, 417), which never passed through
	// serveOuter; Write stamps the version header into it.
	handled atomic.Bool
	// table and slot are this connection's place under the connection bound.
	table *connTable
	slot  *connSlot
}

type connKey struct{}

// Close releases the connection's place under the bound.
func (c *tlsProbeConn) Close() error {
	if c.slot != nil {
		c.table.release(c.slot)
	}
	return c.Conn.Close()
}

func (c *tlsProbeConn) handlerOwns() { c.handled.Store(true) }
func (c *tlsProbeConn) serverOwns()  { c.handled.Store(false) }

// Write stamps the version header into the first write net/http makes while
// no handler owns the connection. Only that first write, and only when it is
// a status line whose header block lacks the header: writes inside a
// handler's response, body bytes included, are never examined, so a file
// that happens to start with "HTTP/1.1" downloads unchanged.
func (c *tlsProbeConn) Write(p []byte) (int, error) {
	if c.handled.Load() || !c.handled.CompareAndSwap(false, true) {
		return c.Conn.Write(p)
	}
	stamped, ok := stampVersion(p)
	if !ok {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(stamped)
	if err != nil {
		return min(n, len(p)), err
	}
	return len(p), nil
}

// stampVersion inserts the version header after the status line of a
// response head that lacks it.
func stampVersion(p []byte) ([]byte, bool) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.")) {
		return nil, false
	}
	line := bytes.Index(p, []byte("\r\n"))
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if line < 0 || end < 0 {
		return nil, false
	}
	head := bytes.ToLower(p[line : end+2])
	if bytes.Contains(head, []byte("\r\n"+protocol.VersionHeader+":")) {
		return nil, false
	}
	out := make([]byte, 0, len(p)+len(protocol.VersionHeader)+len(Version)+4)
	out = append(out, p[:line+2]...)
	out = append(out, protocol.VersionHeader+": "...)
	out = append(out, Version...)
	out = append(out, "\r\n"...)
	return append(out, p[line+2:]...), true
}

func (c *tlsProbeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.checked.CompareAndSwap(false, true) && p[0] == tlsHandshakeRecord {
		c.log.Debug("TLS handshake on the plain HTTP port; answered 400", "remote", c.RemoteAddr().String())
		c.answerTLSProbe()
		return 0, io.EOF
	}
	return n, err
}

// ReadFrom hands the copy to the wrapped connection's ReadFrom, so a
// download served through http.response.ReadFrom still reaches sendfile on
// the *net.TCPConn underneath; without it the wrapper hides that method and
// net/http copies the file through a 32 KiB buffer instead. Writes never touch
// the probe check, which is about the first bytes read.
func (c *tlsProbeConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// writerOnly hides every method but Write, so io.Copy cannot recurse into
// ReadFrom.
type writerOnly struct{ io.Writer }

func (c *tlsProbeConn) answerTLSProbe() {
	const body = "this port speaks plain HTTP, not TLS\n"
	resp := "HTTP/1.1 400 Bad Request\r\n" +
		protocol.VersionHeader + ": " + Version + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n\r\n" + body
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.Conn, resp); err != nil {
		return
	}
	// Half-close and swallow what the prober still sends, so closing does not
	// turn into a reset that destroys the 400 before the peer reads it.
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, c.Conn, 64<<10)
}

// The fs routes are served by FS. The gate has already authorized the
// request, refused a declared length over max_body_bytes, and wrapped r.Body
// in http.MaxBytesReader(max_body_bytes); that is the only place the cap is
// applied, so an undeclared over-cap upload surfaces to FS as
// *http.MaxBytesError while reading.
