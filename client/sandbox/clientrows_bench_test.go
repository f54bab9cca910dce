package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
)

// BenchmarkClientRows is the Go row of the cross-language table `make
// bench-clients` prints (scripts/bench/clients.py): against one sandbox on
// the local emulator, a file write and read and streamed stdout of
// $MICROVMS_BENCH_MIB MiB (256 unset) and 200 short Run calls per op. The
// streamed output is text lines, as a build or test log is: NUL bytes from
// /dev/zero would weigh the engine's JSON frames (six bytes each) instead. The
// Python and TypeScript rows run the same four operations through their
// packages' `microvm engine`, so their ratios to this row are what the engine
// hop and each language cost.
//
//	go test ./client/sandbox/ -run '^$' -bench BenchmarkClientRows -benchtime 1x
func BenchmarkClientRows(b *testing.B) {
	ctx := context.Background()
	mib := 256
	if v := os.Getenv("MICROVMS_BENCH_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("MICROVMS_BENCH_MIB=%q is not a positive count of MiB", v)
		}
		mib = n
	}
	size := mib << 20
	emu := startEmbedded(b)
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	const path = "/tmp/microvms-bench.bin"
	b.Run(fmt.Sprintf("stream-%dMiB", mib), func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			var n countingWriter
			res, err := sb.Run(ctx, []string{"sh", "-c", "yes 0123456789abcdef | head -c " + strconv.Itoa(size)}, client.RunOptions{Stdout: &n})
			if err != nil {
				b.Fatal(err)
			}
			if res.ExitStatus != 0 {
				b.Fatalf("the stream's command exited %d", res.ExitStatus)
			}
			// agentd keeps a bounded window of output per exec; a reader
			// that falls behind it (a loaded machine) loses bytes, which
			// the table reports beside the time rather than failing on.
			if lost := size - int(n); lost != 0 {
				b.ReportMetric(float64(lost), "lost-bytes")
			}
		}
	})
	b.Run("run-x200", func(b *testing.B) {
		for b.Loop() {
			for range 200 {
				if _, err := sb.Run(ctx, []string{"true"}, client.RunOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	// The Python and TypeScript rows end with the write (an engine that
	// refuses it takes the sandbox with it), so this row runs in their
	// order and conditions: the read's file is made in the guest, and the
	// write replaces it. A write into a fresh sandbox's empty /tmp measured
	// 0.16-0.18 s here against 0.23-0.27 s over the read's file (the
	// guest's tmpfs frees the old file's pages as the new one takes its
	// name): timed in different places, the rows compared different work.
	fill := fmt.Sprintf("yes 0123456789abcdef | tr -d '\\n' | head -c %d > %s", size, path)
	if _, err := sb.Run(ctx, []string{"sh", "-c", fill}, client.RunOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("read-%dMiB", mib), func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			// ReadFile holds at most MaxReadFileBytes; a larger file is
			// read through the session's stream, into memory as the
			// Python and TypeScript rows read it.
			rc, err := sb.Session().OpenFile(ctx, path, client.LineRange{})
			if err != nil {
				b.Fatal(err)
			}
			// Into a buffer of the file's size, as a caller who knows it
			// (stat) reads: io.ReadAll's regrowth would time the allocator.
			got := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
			_, err = got.ReadFrom(rc)
			rc.Close()
			if err != nil {
				b.Fatal(err)
			}
			if got.Len() != size {
				b.Fatalf("read %d bytes, wrote %d", got.Len(), size)
			}
		}
	})
	b.Run(fmt.Sprintf("write-%dMiB", mib), func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			if err := sb.WriteFile(ctx, path, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	if _, err := sb.Run(ctx, []string{"rm", "-f", path}, client.RunOptions{}); err != nil {
		b.Fatal(err)
	}
}

// countingWriter counts streamed bytes and keeps none.
type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
