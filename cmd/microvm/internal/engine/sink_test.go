package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
)

// Catches: a sink whose frames are not x-frames (header layout, big-endian
// offset and length), output over FrameMaxPayloadBytes in one frame (a
// reader bounding frames refuses it) or cut without advancing the offset,
// gap and exit frames that are not the protocol's JSON, and a FIFO with no
// reader that blocks the request instead of refusing it.
func TestSinkWritesXFrames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink")
	s, err := openSink(path)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xff}, protocol.FrameMaxPayloadBytes+10) // not UTF-8: raw bytes must survive
	if err := s.output(protocol.StreamStdout, 5, big); err != nil {
		t.Fatal(err)
	}
	if err := s.output(protocol.StreamStderr, uint64(5+len(big)), []byte("e")); err != nil {
		t.Fatal(err)
	}
	if err := s.event(protocol.FrameGap, 100, protocol.GapEvent{From: 100, To: 200}); err != nil {
		t.Fatal(err)
	}
	code := int32(3)
	if err := s.event(protocol.FrameExit, 200, protocol.ExitEvent{ExitCode: &code, Offset: 200}); err != nil {
		t.Fatal(err)
	}
	s.close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type frame struct {
		typ     uint8
		offset  uint64
		payload []byte
	}
	var got []frame
	for len(raw) > 0 {
		if len(raw) < protocol.FrameHeaderBytes {
			t.Fatalf("%d bytes left, less than a header", len(raw))
		}
		n := binary.BigEndian.Uint32(raw[9:13])
		if n > protocol.FrameMaxPayloadBytes || int(n) > len(raw)-protocol.FrameHeaderBytes {
			t.Fatalf("frame length %d over the bound or the data", n)
		}
		got = append(got, frame{raw[0], binary.BigEndian.Uint64(raw[1:9]), raw[13 : 13+n]})
		raw = raw[13+n:]
	}
	if len(got) != 5 {
		t.Fatalf("%d frames, want 5", len(got))
	}
	if got[0].typ != protocol.FrameStdout || got[0].offset != 5 || len(got[0].payload) != protocol.FrameMaxPayloadBytes ||
		got[1].typ != protocol.FrameStdout || got[1].offset != uint64(5+protocol.FrameMaxPayloadBytes) || !bytes.Equal(got[1].payload, big[protocol.FrameMaxPayloadBytes:]) {
		t.Fatalf("the large output's frames: %d@%d, %d@%d", got[0].typ, got[0].offset, got[1].typ, got[1].offset)
	}
	if got[2].typ != protocol.FrameStderr || string(got[2].payload) != "e" {
		t.Fatalf("stderr frame: %+v", got[2])
	}
	var gap protocol.GapEvent
	var exit protocol.ExitEvent
	if got[3].typ != protocol.FrameGap || json.Unmarshal(got[3].payload, &gap) != nil || gap.From != 100 || gap.To != 200 || got[3].offset != 100 {
		t.Fatalf("gap frame: %+v", got[3])
	}
	if got[4].typ != protocol.FrameExit || json.Unmarshal(got[4].payload, &exit) != nil || exit.ExitCode == nil || *exit.ExitCode != 3 || got[4].offset != 200 {
		t.Fatalf("exit frame: %+v", got[4])
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	if _, err := openSink(fifo); err == nil || !strings.Contains(err.Error(), "nobody has open for reading") {
		t.Fatalf("a FIFO with no reader: %v", err)
	}
	// A Unix socket sink is dialled (how Node takes one): the frames arrive
	// on the accepted connection, and its close is their end.
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // left behind, nobody listening, below
	defer l.Close()
	ss, err := openSink(sock)
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ss.output(protocol.StreamStdout, 7, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	ss.close()
	if got, _ := io.ReadAll(c); len(got) != protocol.FrameHeaderBytes+2 || got[0] != protocol.FrameStdout || string(got[13:]) != "hi" || binary.BigEndian.Uint64(got[1:9]) != 7 {
		t.Fatalf("over the socket: %v", got)
	}
	l.Close()
	if _, err := openSink(sock); err == nil {
		t.Fatal("a socket nobody listens on was taken as a sink")
	}
	if s, err := openSink(""); s != nil || err != nil {
		t.Fatalf("no sink: %v %v", s, err)
	}
}

// Catches: mkfifo making something other than a private FIFO, taking a
// path that exists (another FIFO or file the caller did not mean) or an
// empty one, and a FIFO sink left at the 64 KiB default buffer, which
// holds a reader that cannot set it (Node) to 64 KiB reads.
func TestMakeFIFOSink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := makeFIFO(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("made %v, want a FIFO with mode 0600", fi.Mode())
	}
	if err := makeFIFO(path); err == nil || !strings.Contains(err.Error(), "making the FIFO") {
		t.Fatalf("a path that exists: %v", err)
	}
	if err := makeFIFO(""); err == nil {
		t.Fatal("an empty path was taken")
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := openSink(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		rc, err := r.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var size int
		var ferr error
		if err := rc.Control(func(fd uintptr) { size, ferr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); err != nil || ferr != nil {
			t.Fatal(err, ferr)
		}
		if size < sinkPipeBytes {
			t.Fatalf("the sink FIFO's buffer is %d bytes, want %d", size, sinkPipeBytes)
		}
	}
	if err := s.output(protocol.StreamStdout, 0, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	s.close()
	got, err := io.ReadAll(r)
	if err != nil || len(got) != protocol.FrameHeaderBytes+2 || string(got[13:]) != "hi" {
		t.Fatalf("through the FIFO: %q %v", got, err)
	}
}

// TestReadBoundOnlyLowers: maxBytes lowers a read mode's own bound and never
// raises it. Catches: a caller's maxBytes above MAX_READ_FILE_BYTES or
// DEFAULT_MAX_DOWNLOAD_BYTES taken as the bound, which would let one request
// hold more in the engine than any read may.
func TestReadBoundOnlyLowers(t *testing.T) {
	for _, c := range []struct{ max, own, want int64 }{{0, 64, 64}, {10, 64, 10}, {64, 64, 64}, {65, 64, 64}, {1 << 40, 64, 64}} {
		if got := readBound(c.max, c.own); got != c.want {
			t.Errorf("readBound(%d, %d) = %d, want %d", c.max, c.own, got, c.want)
		}
	}
}
