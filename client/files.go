package client

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/fullcopy"
)

// LineRange selects lines of a file, 1-based and inclusive. Zero Start means
// line 1; zero End means through the end of the file.
type LineRange struct {
	Start, End uint64
}

// OpenFile streams the file at path (or the selected lines). A missing file
// is an error for which errors.Is(err, fs.ErrNotExist) holds. The caller must
// close the reader; nothing is buffered whole.
func (s *Session) OpenFile(ctx context.Context, path string, lines LineRange) (io.ReadCloser, error) {
	awake := s.busy()
	params := protocol.FsReadFileParams{Path: path}
	if lines.Start != 0 {
		params.StartLine = &lines.Start
	}
	if lines.End != 0 {
		params.EndLine = &lines.End
	}
	resp, err := s.send(ctx, call{op: protocol.OpFsReadFile, file: true, path: path,
		build: func(server string) (*http.Request, error) { return protocol.NewFsReadFileRequest(server, &params) }})
	if err != nil {
		awake()
		return nil, err
	}
	return &transportBody{op: protocol.OpFsReadFile, rc: resp.Body, awake: awake}, nil
}

// ReadFile copies the file at path (or the selected lines) to w. It holds
// nothing itself and sets no bound: the guest decides how many bytes come,
// so a w that keeps them should bound itself (a BoundedWriter), or use
// Download, which does.
func (s *Session) ReadFile(ctx context.Context, path string, w io.Writer, lines LineRange) (int64, error) {
	rc, err := s.OpenFile(ctx, path, lines)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(w, rc)
}

// WriteFile streams r into the file at path, creating parents. A zero mode
// leaves the daemon's default. The body is sent as it is read, so the call
// is not retried. It returns once the whole file is under its name in the
// VM (never a partial one), without waiting for the disk: WriteFileDurable
// waits.
func (s *Session) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	return s.writeFile(ctx, path, r, mode, false)
}

// WriteFileDurable is WriteFile that returns only once the file and its
// directory entry are on the VM's disk (PUT /v1/fs/file?sync=true: the
// daemon fsyncs both before answering). WriteFile returns once the bytes are
// in the guest's page cache, which every process in the VM reads and a
// suspend keeps; a whole 256 MiB fsync cost about a tenth of that upload's
// throughput on the shared ruler. Use this for a file that must outlive a
// crash of the guest kernel.
func (s *Session) WriteFileDurable(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	return s.writeFile(ctx, path, r, mode, true)
}

func (s *Session) writeFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode, durable bool) error {
	defer s.busy()()
	params := protocol.FsWriteFileParams{Path: path}
	if durable {
		params.Sync = &durable
	}
	if mode != 0 {
		m := strconv.FormatUint(uint64(mode.Perm()), 8)
		params.Mode = &m
	}
	body, size := newUploadBody(r)
	resp, err := s.send(ctx, call{op: protocol.OpFsWriteFile, oneShot: true, path: path,
		build: func(server string) (*http.Request, error) {
			req, err := protocol.NewFsWriteFileRequestWithBody(server, &params, "application/octet-stream", body)
			return withSize(req, size), err
		}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// OpenTar streams the directory tree at dir as an uncompressed tar.
func (s *Session) OpenTar(ctx context.Context, dir string) (io.ReadCloser, error) {
	params := protocol.FsReadTarParams{Path: dir}
	return s.openTar(ctx, protocol.OpFsReadTar, dir, func(server string) (*http.Request, error) {
		return protocol.NewFsReadTarRequest(server, &params)
	})
}

// OpenTarExact streams the directory tree at dir as OpenTar does, through
// the daemon's GET /v1/fs/tar/exact: every member in PAX, its modification
// time to the nanosecond (OpenTar's carry whole seconds), no access or
// change time. What WriteTarExact puts back. A daemon without the route
// (the reference's, an older one) answers 404, which reads as a missing
// directory: ask Serves(ctx, protocol.OpFsReadTarExact) first.
func (s *Session) OpenTarExact(ctx context.Context, dir string) (io.ReadCloser, error) {
	params := protocol.FsReadTarExactParams{Path: dir}
	return s.openTar(ctx, protocol.OpFsReadTarExact, dir, func(server string) (*http.Request, error) {
		return protocol.NewFsReadTarExactRequest(server, &params)
	})
}

// openTar is OpenTar and OpenTarExact: the request build makes, its body
// held open with the session kept awake until Close.
func (s *Session) openTar(ctx context.Context, op, dir string, build func(server string) (*http.Request, error)) (io.ReadCloser, error) {
	awake := s.busy()
	resp, err := s.send(ctx, call{op: op, file: true, path: dir, build: build})
	if err != nil {
		awake()
		return nil, err
	}
	return &transportBody{op: op, rc: resp.Body, awake: awake}, nil
}

// ReadTar copies the tar of dir to w, with no bound of its own (see
// ReadFile).
func (s *Session) ReadTar(ctx context.Context, dir string, w io.Writer) (int64, error) {
	rc, err := s.OpenTar(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(w, rc)
}

// WriteTar streams the uncompressed tar r into dir, where the daemon extracts
// it confined beneath dir.
func (s *Session) WriteTar(ctx context.Context, dir string, r io.Reader) error {
	params := protocol.FsWriteTarParams{Path: dir}
	return s.writeTar(ctx, protocol.OpFsWriteTar, dir, r, func(server string, body io.Reader) (*http.Request, error) {
		return protocol.NewFsWriteTarRequestWithBody(server, &params, "application/x-tar", body)
	})
}

// WriteTarExact streams the uncompressed tar r into dir through the
// daemon's exact extraction (PUT /v1/fs/tar/exact): confined beneath dir
// as WriteTar is, but keeping the archive's own modes (setuid, setgid and
// sticky too), owners, nanosecond times and symlink targets instead of the
// data filter's defaults; a "./" directory member sets dir's own. It is
// for putting back a tree this system saved (a checkpoint's restore). A
// daemon without the route (the reference's, an older one) answers
// NotFound: ask Serves(ctx, protocol.OpFsWriteTarExact) first.
func (s *Session) WriteTarExact(ctx context.Context, dir string, r io.Reader) error {
	params := protocol.FsWriteTarExactParams{Path: dir}
	return s.writeTar(ctx, protocol.OpFsWriteTarExact, dir, r, func(server string, body io.Reader) (*http.Request, error) {
		return protocol.NewFsWriteTarExactRequestWithBody(server, &params, "application/x-tar", body)
	})
}

// writeTar is WriteTar and WriteTarExact: r is the caller's reader, so the
// call is oneShot, and its length goes with it when it is known.
func (s *Session) writeTar(ctx context.Context, op, dir string, r io.Reader, build func(server string, body io.Reader) (*http.Request, error)) error {
	defer s.busy()()
	body, size := newUploadBody(r)
	resp, err := s.send(ctx, call{op: op, oneShot: true, path: dir,
		build: func(server string) (*http.Request, error) {
			req, err := build(server, body)
			return withSize(req, size), err
		}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// transportBody classifies a failure mid-body as a Transport error.
type transportBody struct {
	op    string
	rc    io.ReadCloser
	awake func() // the session's keep-awake hold, released by Close
}

func (b *transportBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = WireErrorf(taxonomy.WireTransport, "%s: the body broke after %s: %v", b.op, "the answer started", err).WithCause(err)
	}
	return n, err
}

func (b *transportBody) Close() error {
	if b.awake != nil {
		b.awake()
	}
	return b.rc.Close()
}

// WriteTo is what io.Copy uses to drain a body (ReadFile, ReadTar, or a
// caller's own io.Copy of OpenFile's reader). An HTTP body cannot be spliced,
// and the destination's ReadFrom (an *os.File's, say) would fall back to a
// 32 KiB buffer, so the copy goes through a large pooled buffer instead:
// far fewer read and write syscalls per byte. Read errors are classified as
// Read classifies them; write errors are the writer's own.
// Each write waits for a full buffer (or the end), as package fullcopy does.
func (b *transportBody) WriteTo(w io.Writer) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return fullcopy.Copy(w, b, *bp)
}

// copyBufferBytes is the size of the buffers bulk transfers copy through.
const copyBufferBytes = 1 << 20

// copyBuffers holds those buffers only while a copy is in progress.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferBytes); return &b }}

// readerOnly and writerOnly hide every method but Read and Write, so
// io.CopyBuffer uses the buffer it is given rather than a WriteTo or ReadFrom.
type readerOnly struct{ io.Reader }

type writerOnly struct{ io.Writer }

// uploadBody is an upload's request body. The transport sends a body of
// unknown length chunked, copying it with io.Copy; for an *os.File that
// copy goes through a 32 KiB buffer, so every 32 KiB became its own chunk,
// flush and write syscall on this side and a separate chunk to parse and
// read on the daemon's. WriteTo hands the transport large chunks instead.
// The bytes, their order and the end of the body (the reader's EOF) are
// unchanged; Close reaches the reader when it is a Closer, as it did when
// the reader itself was the body.
type uploadBody struct{ r io.Reader }

func (u *uploadBody) Read(p []byte) (int, error) { return u.r.Read(p) }

func (u *uploadBody) WriteTo(w io.Writer) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return io.CopyBuffer(writerOnly{w}, readerOnly{u.r}, *bp)
}

func (u *uploadBody) Close() error {
	if c, ok := u.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// SizedReader is r declared to hold exactly n bytes: an upload of it
// (WriteFile, WriteTar) is sent with n as its Content-Length instead of
// chunked, so a proxy in front of agentd forwards it as it is rather than
// re-chunking it, and agentd reads it without parsing chunks. An r that
// ends before n bytes fails the upload with nothing written; what r holds
// past n is never read (r may be a socket another process keeps open).
func SizedReader(r io.Reader, n int64) io.Reader { return &sizedReader{r: r, n: n} }

type sizedReader struct {
	r io.Reader
	n int64
}

// Read ends at n bytes: the transport reads a body on past its length to
// refuse extra bytes, after the daemon has taken the whole file.
func (b *sizedReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	k, err := b.r.Read(p)
	b.n -= int64(k)
	return k, err
}

// newUploadBody wraps r for an upload; nil and a known-length reader (which
// the request gives a Content-Length, and the transport copies as is) stay
// as they are. A regular file is sent as itself with its remaining size as
// the Content-Length (size, else -1), so the transport hands it to the
// kernel with sendfile instead of copying it through this process: a
// 256 MiB upload then costs this side a few tens of milliseconds of CPU.
func newUploadBody(r io.Reader) (body io.Reader, size int64) {
	switch f := r.(type) {
	case nil, *bytes.Buffer, *bytes.Reader, *strings.Reader:
		return r, -1
	case *sizedReader:
		// Through uploadBody, as any other reader. Its WriteTo is not
		// reached here: the transport wraps a body of known length in an
		// io.LimitReader, which hides it, and copies 32 KiB at a time.
		return &uploadBody{r: f}, f.n
	case *os.File:
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if off, err := f.Seek(0, io.SeekCurrent); err == nil && off <= st.Size() {
				return f, st.Size() - off
			}
		}
	}
	return &uploadBody{r: r}, -1
}

// withSize sets a known body size on a built request (nil stays nil); -1
// leaves it as built. A zero size also swaps the body for http.NoBody,
// since a zero ContentLength with a non-nil body means "unknown" to the
// transport.
func withSize(req *http.Request, size int64) *http.Request {
	if req == nil || size < 0 {
		return req
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	return req
}
