package agentd

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// peakRSS reads VmHWM, and resetPeakRSS benchZeroes it (clear_refs "5"), so a
// benchmark reports the high-water mark of just its own workload. The test
// client runs in the same process, so the figure is an upper bound for the
// daemon side.
func peakRSS(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	b.Skip("no VmHWM")
	return 0
}

func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skip("cannot reset the RSS high-water mark:", err)
	}
}

// benchZeroes is an endless source of zero bytes with no allocation per read.
type benchZeroes struct{}

func (benchZeroes) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// BenchmarkUploadTar2GiB streams a generated 2 GiB single-member tar through
// PUT /v1/fs/tar over real HTTP and reports the process's peak RSS: the
// archive must be spooled and extracted without ever being held in memory.
func BenchmarkUploadTar2GiB(b *testing.B) {
	const size = 2 << 30
	f := testFS(protocol.LimitSet{MaxTarBytes: 4 << 30})
	f.spoolDir = b.TempDir()
	srv := fsServer(b, f)
	for i := 0; i < b.N; i++ {
		root := filepath.Join(b.TempDir(), "root")
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
			io.CopyN(tw, benchZeroes{}, size)
			pw.CloseWithError(tw.Close())
		}()
		runtimeGC()
		resetPeakRSS(b)
		req, _ := http.NewRequest("PUT", srv.URL+"/v1/fs/tar?path="+root, pr)
		resp, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		b.ReportMetric(peakRSS(b), "peak-RSS-MiB")
		b.SetBytes(size)
		os.RemoveAll(filepath.Dir(root))
	}
}

// BenchmarkReadLines1to5Of2GiB reads lines 1..5 of a sparse 2 GiB file over
// real HTTP and reports peak RSS and the bytes the handler read from disk
// (via /proc/self/io rchar): the window closes in the first chunk.
func BenchmarkReadLines1to5Of2GiB(b *testing.B) {
	p := filepath.Join(b.TempDir(), "big.txt")
	head := strings.Repeat("a line of text\n", 10)
	if err := os.WriteFile(p, []byte(head), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(p, 2<<30); err != nil {
		b.Fatal(err)
	}
	srv := fsServer(b, testFS(protocol.LimitSet{}))
	url := srv.URL + "/v1/fs/file?path=" + p + "&start_line=1&end_line=5"
	var got []byte
	for i := 0; i < b.N; i++ {
		runtimeGC()
		resetPeakRSS(b)
		before := readChars(b)
		resp, err := srv.Client().Get(url)
		if err != nil {
			b.Fatal(err)
		}
		got, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		b.ReportMetric(peakRSS(b), "peak-RSS-MiB")
		b.ReportMetric(float64(readChars(b)-before)/1024, "KiB-read")
	}
	if !bytes.Equal(got, []byte(strings.Repeat("a line of text\n", 5))) {
		b.Fatalf("got %q", got)
	}
}

// readChars is the process's rchar: every byte read through read(2) and
// friends, sockets included, so it bounds what the handler read from disk.
func readChars(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skip("no /proc/self/io")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func runtimeGC() { runtime.GC(); debug.FreeOSMemory() }
