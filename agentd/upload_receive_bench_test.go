package agentd

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkUploadReceivePath weighs the two ways a daemon can land an upload
// that arrives on a loopback socket fed by sendfile: what agentd's
// PUT /v1/fs/file does (read into a pooled uploadBufferBytes buffer, then
// write), and splice(2) socket to pipe to file ((*os.File).ReadFrom on the
// TCP connection, which the ruler's loopback baseline uses). Rotated every
// round; splice-x-read is splice's time over read's (above 1: splice is
// slower). The daemon cannot splice without taking the connection from
// net/http (Hijack, Connection: close), so splice must pay for that first. On
// this machine it does not: splice measured 0.89-0.97 GB/s against 1.0-1.04
// for read and write, with no less CPU (0.15-0.17 s against 0.14-0.16 s per
// 256 MiB, separate processes, 2026-12-02), so the daemon keeps net/http's body.
func BenchmarkUploadReceivePath(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	writeBenchFile(b, src, transferBytes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	dst := filepath.Join(dir, "dst.bin")
	receive := func(splice bool) time.Duration {
		done := make(chan error, 1)
		go func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				done <- err
				return
			}
			defer c.Close()
			f, err := os.Open(src)
			if err != nil {
				done <- err
				return
			}
			defer f.Close()
			_, err = io.Copy(c, f) // sendfile, as the ruler's client sends
			done <- err
		}()
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		_ = os.Remove(dst)
		out, err := os.Create(dst)
		if err != nil {
			b.Fatal(err)
		}
		settle()
		t0 := time.Now()
		if splice {
			_, err = out.ReadFrom(&io.LimitedReader{R: c, N: transferBytes})
		} else {
			_, err = copyBody(out, io.LimitReader(c, transferBytes))
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		dt := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return dt
	}
	b.SetBytes(transferBytes)
	var readT, spliceT time.Duration
	for i := range b.N {
		for k := range 2 {
			splice := (i+k)%2 == 1
			if dt := receive(splice); splice {
				spliceT += dt
			} else {
				readT += dt
			}
		}
	}
	b.ReportMetric(float64(spliceT)/float64(readT), "splice-x-read")
}
