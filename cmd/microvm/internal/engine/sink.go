package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// frameSink is a stream op's sink: its events written as agentd's binary
// frames (api/openapi.yaml x-frames) into a FIFO or file on this host, so
// the output's bytes reach the package raw, neither turned into text
// (lossy for binary output) nor JSON-escaped onto the engine pipe, which
// is what held the packages' streams to a fraction of Go's.
type frameSink struct {
	path string
	f    io.WriteCloser
	buf  []byte // one frame, header and payload, written at once
}

// openSink opens path for writing: a Unix socket the caller listens on
// (how Node, which cannot make a FIFO, takes a sink) is dialled; anything
// else is opened as a file. A FIFO is opened without blocking: one with no
// reader (the caller never opened it, or is gone) is refused at once rather
// than holding the request for ever; writes then block while the reader is
// behind, which is the stream's back-pressure. An empty path is no sink
// (nil), and closing nil does nothing.
func openSink(path string) (*frameSink, error) {
	if path == "" {
		return nil, nil
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		c, err := net.Dial("unix", path)
		if err != nil {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: nobody listens on the sink socket %s: %v", path, err)
		}
		return &frameSink{path: path, f: c}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ENXIO) {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: sink %s is a FIFO nobody has open for reading; open it before the request", path)
	}
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: opening the sink: %v", err)
	}
	if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		widenPipe(f)
	}
	return &frameSink{path: path, f: f}, nil
}

// makeFIFO is the mkfifo op: a FIFO at path for a caller that cannot make
// one (Node has no mkfifo), which then uses it as a sink as if it had.
func makeFIFO(path string) error {
	if path == "" {
		return client.Errorf(taxonomy.KindInvalidArg, "", "engine: mkfifo needs a path")
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "engine: making the FIFO %s: %v", path, err)
	}
	return nil
}

// write sends one frame in one write: a reader woken by a header written
// alone pays a read for its 13 bytes (in Node, a trip through the thread
// pool), one per frame.
func (s *frameSink) write(typ uint8, offset uint64, payload []byte) error {
	n := protocol.FrameHeaderBytes + len(payload)
	if cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	b := s.buf[:n]
	b[0] = typ
	binary.BigEndian.PutUint64(b[1:9], offset)
	binary.BigEndian.PutUint32(b[9:13], uint32(len(payload)))
	copy(b[protocol.FrameHeaderBytes:], payload)
	if _, err := s.f.Write(b); err != nil {
		return s.lost(err)
	}
	return nil
}

func (s *frameSink) lost(err error) error {
	return client.Errorf(taxonomy.KindInterrupted, "", "engine: writing to the sink %s: %v (its reader went away?)", s.path, err)
}

// output writes data at offset as stdout or stderr frames of at most
// FrameMaxPayloadBytes each, as agentd cuts them.
func (s *frameSink) output(stream protocol.StreamKind, offset uint64, data []byte) error {
	typ := protocol.FrameStdout
	if stream == protocol.StreamStderr {
		typ = protocol.FrameStderr
	}
	for len(data) > 0 {
		n := min(len(data), protocol.FrameMaxPayloadBytes)
		if err := s.write(typ, offset, data[:n]); err != nil {
			return err
		}
		data, offset = data[n:], offset+uint64(n)
	}
	return nil
}

// event writes a gap or exit frame: the event's JSON, offset its from or
// offset.
func (s *frameSink) event(typ uint8, offset uint64, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("engine: encoding a frame: %w", err)
	}
	return s.write(typ, offset, b)
}

// close ends the sink, the reader's end of file.
func (s *frameSink) close() {
	if s != nil {
		_ = s.f.Close()
	}
}

// readToSink copies the file at path into the sink at sinkPath as it
// arrives: raw bytes, the sink's close their end. It is bounded as a
// download is (DEFAULT_MAX_DOWNLOAD_BYTES), so a guest cannot pour without
// end into a reader that trusted the file's size.
func readToSink(ctx context.Context, sb *sandbox.Sandbox, path, sinkPath string, maxBytes int64) (int64, error) {
	sess, err := session(sb)
	if err != nil {
		return 0, err
	}
	sink, err := openSink(sinkPath)
	if err != nil {
		return 0, err
	}
	defer sink.close()
	bw := &client.BoundedWriter{W: sink.f, Limit: taxonomy.DefaultMaxDownloadBytes, Key: "DEFAULT_MAX_DOWNLOAD_BYTES",
		Op: "engine: reading " + path, What: "the file", Hint: "copy a larger file with `microvm cp --max-bytes N`"}
	limit := readBound(maxBytes, bw.Limit)
	bw.Limit = limit
	rc, err := sess.OpenFile(ctx, path, client.LineRange{})
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	// Each read of the body up to sinkChunk, written as it comes: io.Copy's
	// 32 KiB would wake the reader (a trip through Node's thread pool or
	// Python's interpreter) for every 32 KiB.
	n, err := io.CopyBuffer(struct{ io.Writer }{bw}, struct{ io.Reader }{rc}, make([]byte, sinkChunk))
	if limit < taxonomy.DefaultMaxDownloadBytes && errors.Is(err, client.ErrOverBound) {
		return n, overMaxBytes(path, limit)
	}
	return n, err
}

// sinkChunk is the most one write of a read's sink carries: a FIFO sink's
// buffer (sinkPipeBytes on Linux).
const sinkChunk = 1 << 20
