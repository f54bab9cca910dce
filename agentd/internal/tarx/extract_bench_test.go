package tarx

import (
	"archive/tar"
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// benchTree writes an archive of a mixed tree: many small files in nested
// directories and a few large ones, 512 MiB of content in all.
func benchTree(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "tree.tar")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>9)
	}
	write := func(name string, size int) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
			b.Fatal(err)
		}
		for size > 0 {
			n := min(size, len(chunk))
			tw.Write(chunk[:n])
			size -= n
		}
	}
	for d := 0; d < 64; d++ {
		dir := fmt.Sprintf("pkg%02d/sub%02d/", d%8, d)
		tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir})
		for i := 0; i < 64; i++ {
			write(fmt.Sprintf("%sfile%03d.dat", dir, i), 64<<10) // 4096 × 64 KiB = 256 MiB
		}
	}
	for i := 0; i < 16; i++ {
		write(fmt.Sprintf("blobs/blob%02d.bin", i), 16<<20) // 256 MiB
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	bw.Flush()
	f.Close()
	return p
}

// BenchmarkExtractVsGNUTar extracts the same archive with this package and
// with the system `tar -x` in the same run, alternating which goes first,
// and reports throughput for both and their ratio (ours/tar; the target is
// at least 0.8). No wall-clock assertion: the ratio is reported, not judged.
func BenchmarkExtractVsGNUTar(b *testing.B) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		b.Skip("no system tar")
	}
	archive := benchTree(b)
	const content = 512 << 20
	var ours, theirs time.Duration
	runOurs := func(dst string) {
		f, err := os.Open(archive)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		t0 := time.Now()
		if _, err := Extract(dst, bufio.NewReaderSize(f, 1<<20), Options{Caps: Caps{MaxMembers: 1 << 20, MaxBytes: 1 << 40}, Log: quiet}); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(t0)
	}
	runTar := func(dst string) {
		os.MkdirAll(dst, 0o755)
		t0 := time.Now()
		// --no-same-owner: this package never chowns, so neither should the
		// baseline (GNU tar does by default when run as root).
		if out, err := exec.Command(tarBin, "--no-same-owner", "-xf", archive, "-C", dst).CombinedOutput(); err != nil {
			b.Fatalf("tar: %v %s", err, out)
		}
		theirs += time.Since(t0)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		base := b.TempDir()
		if i%2 == 0 {
			runOurs(filepath.Join(base, "ours"))
			runTar(filepath.Join(base, "tar"))
		} else {
			runTar(filepath.Join(base, "tar"))
			runOurs(filepath.Join(base, "ours"))
		}
		b.StopTimer()
		os.RemoveAll(base)
		b.StartTimer()
	}
	mib := float64(content) / (1 << 20) * float64(b.N)
	b.ReportMetric(mib/ours.Seconds(), "ours-MiB/s")
	b.ReportMetric(mib/theirs.Seconds(), "tar-MiB/s")
	b.ReportMetric(theirs.Seconds()/ours.Seconds(), "ratio-vs-tar")
}
