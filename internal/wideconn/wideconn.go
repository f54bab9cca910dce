// Package wideconn gives the endpoint proxy's copies of a body a large
// buffer: a connection's writes of a streamed body (Conn), a forwarded
// request body (Body), and the ReverseProxy's own copies (Buffers). net/http's transport sends a request body of known length by
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

// Buffers are the Bytes-sized copy buffers, reused; its Get and Put are
// httputil.BufferPool's, so a ReverseProxy copies answers through them too.
var Buffers = &pool{p: sync.Pool{New: func() any { b := make([]byte, Bytes); return &b }}}

type pool struct{ p sync.Pool }

func (b *pool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *pool) Put(x []byte) { b.p.Put(&x) }

// copyWide copies r to w through one of Buffers, each read written at once.
func copyWide(w io.Writer, r io.Reader) (int64, error) {
	buf := Buffers.Get()
	defer Buffers.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, buf)
}

// Conn wraps c so that ReadFrom copies through a Bytes buffer.
func Conn(c net.Conn) net.Conn { return conn{c} }

type conn struct{ net.Conn }

// ReadFrom copies r to the connection, each read's bytes written at once.
func (c conn) ReadFrom(r io.Reader) (int64, error) { return copyWide(c.Conn, r) }

// Body wraps a request body so that a transport sending it chunked (io.Copy
// into its chunk writer, which takes the body's WriteTo) copies it through
// a Bytes buffer: chunks of what each read returns, up to Bytes, not 32 KiB.
func Body(rc io.ReadCloser) io.ReadCloser { return body{rc} }

type body struct{ io.ReadCloser }

func (b body) WriteTo(w io.Writer) (int64, error) { return copyWide(w, b.ReadCloser) }
