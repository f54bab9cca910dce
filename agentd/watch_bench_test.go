package agentd

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkWatchLatency is the time from a file's creation to its create
// event arriving at an SSE client of a real agentd over loopback: inotify,
// the queue, the SSE write and the client's read, one change at a time.
func BenchmarkWatchLatency(b *testing.B) {
	d := startDaemon(b, nil)
	d.bootstrap(nil)
	dir := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/v1/fs/watch?path="+dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("watch: %v", err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	nextEvent := func() string {
		var name string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				b.Fatalf("stream ended: %v", err)
			}
			line = strings.TrimSuffix(line, "\n")
			if strings.HasPrefix(line, "event: ") {
				name = line[len("event: "):]
			}
			if line == "" && name != "" {
				return name
			}
		}
	}
	if nextEvent() != "ready" {
		b.Fatal("no ready event")
	}
	b.ResetTimer()
	for i := range b.N {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		if name := nextEvent(); name != "fs" {
			b.Fatalf("event %s, want fs", name)
		}
		b.StopTimer()
		f.Close() // its write-free close raises no event the loop would misread
		b.StartTimer()
	}
}
