// Package wideconn gives a connection's writes of a streamed body a large
// buffer. net/http's transport sends a request body of known length by
// handing it, behind an io.LimitReader, to the connection's ReadFrom, and a
// TCP or Unix connection copies a source it cannot splice or sendfile
// through io.Copy's 32 KiB buffer: one write syscall (and one wakeup of
// the reader) per 32 KiB. The emulator's endpoint proxy forwards every
// upload to a guest that way.
//
// It must never hold bytes back: each read's bytes are written at once, as
// io.Copy writes them, so an interactive stream through the proxy flows as
// it did; only a read that finds more waiting returns more.
package wideconn

import (
	"io"
	"net"
	"sync"
)

// Bytes is the copy buffer's size.
const Bytes = 256 << 10

var buffers = sync.Pool{New: func() any { b := make([]byte, Bytes); return &b }}

// Conn wraps c so that ReadFrom copies through a Bytes buffer.
func Conn(c net.Conn) net.Conn { return conn{c} }

type conn struct{ net.Conn }

// ReadFrom copies r to the connection, each read's bytes written at once.
func (c conn) ReadFrom(r io.Reader) (int64, error) {
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{c.Conn}, struct{ io.Reader }{r}, *bp)
}
