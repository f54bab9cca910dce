// Package frames is the binary frame codec of the exec stream and run route
// (x-frames in api/openapi.yaml): type:u8 | offset:u64 BE | length:u32 BE |
// payload. agentd writes frames with Append; the Go client reads them with a
// Reader. Frames carry output bytes as they are, so a stream costs neither
// base64 nor SSE's text framing on either side.
//
// A Reader must never trust a length before checking it: a hostile or broken
// body announcing a 4 GiB payload is refused, not allocated. It must never
// report a body cut inside a frame as a clean end.
package frames

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/microvms/microvms/gen/protocol"
)

// HeaderBytes is the fixed size of a frame header.
const HeaderBytes = protocol.FrameHeaderBytes

// MaxPayload is the most payload one frame may carry.
const MaxPayload = protocol.FrameMaxPayloadBytes

// AppendHeader appends the header of a frame carrying n payload bytes.
func AppendHeader(b []byte, typ uint8, off uint64, n int) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, off)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// Append appends one whole frame. The caller keeps payload within
// MaxPayload; a keepalive has none.
func Append(b []byte, typ uint8, off uint64, payload []byte) []byte {
	b = AppendHeader(b, typ, off, len(payload))
	return append(b, payload...)
}

// ErrMalformed is in the chain of every error a Reader returns for bytes no
// conforming writer sends.
var ErrMalformed = errors.New("malformed frame")

// ErrTooLong is in the chain of the error for a frame announcing more than
// MaxPayload bytes, beside ErrMalformed: refused before a byte of it is
// read or a buffer for it allocated.
var ErrTooLong = errors.New("frame payload over the limit")

// Frame is one decoded frame. Payload is valid until the next Next.
type Frame struct {
	Type    uint8
	Offset  uint64
	Payload []byte
}

// Reader reads frames from a body, reusing one payload buffer.
type Reader struct {
	r   *bufio.Reader
	hdr [HeaderBytes]byte
	buf []byte
}

// NewReader reads frames from r through a buffer of size bytes.
func NewReader(r io.Reader, size int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, size)}
}

// Reset reads from r next, keeping the buffers.
func (fr *Reader) Reset(r io.Reader) { fr.r.Reset(r) }

// Next returns the next frame. A body that ends between frames is io.EOF;
// one that ends inside a frame is io.ErrUnexpectedEOF; an unknown type, a
// keepalive with a payload or a payload over MaxPayload is ErrMalformed.
func (fr *Reader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return Frame{}, err // io.EOF only when not one header byte came
	}
	f := Frame{Type: fr.hdr[0], Offset: binary.BigEndian.Uint64(fr.hdr[1:9])}
	n := binary.BigEndian.Uint32(fr.hdr[9:13])
	switch {
	case f.Type > protocol.FrameExit:
		return Frame{}, fmt.Errorf("%w: unknown type %d", ErrMalformed, f.Type)
	case f.Type == protocol.FrameKeepalive && n != 0:
		return Frame{}, fmt.Errorf("%w: a keepalive with %d payload bytes", ErrMalformed, n)
	case n > MaxPayload:
		return Frame{}, fmt.Errorf("%w: %w: a %d-byte payload is over the %d-byte limit", ErrMalformed, ErrTooLong, n, MaxPayload)
	}
	if n == 0 {
		return f, nil
	}
	// A payload lying whole in the reader's buffer is handed out in place.
	if int(n) <= fr.r.Size() {
		p, err := fr.r.Peek(int(n))
		if err != nil {
			return Frame{}, cut(err)
		}
		_, _ = fr.r.Discard(int(n))
		f.Payload = p
		return f, nil
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	if _, err := io.ReadFull(fr.r, fr.buf[:n]); err != nil {
		return Frame{}, cut(err)
	}
	f.Payload = fr.buf[:n]
	return f, nil
}

// cut turns the end of a body inside a frame into io.ErrUnexpectedEOF.
func cut(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
