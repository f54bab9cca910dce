//go:build linux

package emulator

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testimage"
)

// buildThroughServer has an emulator (its base image a test one) build an
// image from dockerfile and returns its build log once the build ended.
func buildThroughServer(tb testing.TB, name, dockerfile string) []string {
	tb.Helper()
	daemon, err := os.ReadFile(agentdBin)
	if err != nil {
		tb.Fatal(err)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for n, body := range map[string][]byte{"Dockerfile": []byte(dockerfile), "agentd": daemon} {
		w, _ := zw.Create(n)
		_, _ = w.Write(body)
	}
	_ = zw.Close()
	art := filepath.Join(tb.TempDir(), "artifact.zip")
	if err := os.WriteFile(art, zbuf.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
	uri := (&url.URL{Scheme: "file", Path: art}).String()
	s := New(Options{VMs: AgentdLauncher(agentdBin, nil), WallClock: true, StateDir: tb.TempDir(), BaseImage: testimage.Base(tb, false), BuildCache: tb.TempDir()})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		tb.Fatal(err)
	}
	defer stop()
	call := func(method, path, body string) string {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	create, _ := json.Marshal(cp.CreateMicrovmImageRequest{Name: name, BaseImageArn: "arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1",
		BuildRoleArn: "arn:aws:iam::123456789012:role/b", CodeArtifact: cp.CodeArtifact{Uri: &uri}})
	call("POST", "/2025-09-09/microvm-images", string(create))
	var out string
	for i := 0; i < 3000; i++ { // bounded: about five minutes
		out = call("GET", "/2025-09-09/microvm-images/"+name, "")
		if !strings.Contains(out, `"CREATING"`) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out, `"CREATED"`) {
		tb.Fatalf("the image: %s", out)
	}
	return s.LogLines(taxonomy.BuildLogGroupPrefix + name)
}

// noNewlines is a RUN printing n KiB without a newline, with the shell's
// builtins only.
func noNewlines(kib int) string {
	return fmt.Sprintf("RUN i=0; while [ $i -lt %d ]; do printf %%1024s; i=$((i+1)); done\n", kib)
}

// Catches: a build log that keeps a RUN's output without newlines as one
// line however long (the issue-44.5 flood: a 64 MiB line, rescanned per
// chunk under the emulator's lock), and one that keeps every line of a
// step's output for the emulator's life (~150 B each, never freed).
func TestBuildLogLinesAreBounded(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	many := taxonomy.LocalBuildLogLines + 2000
	df := "FROM example.test/base:1\n" + noNewlines(1024) +
		fmt.Sprintf("RUN i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); done\n", many)
	log := buildThroughServer(t, "bounded-log", df)
	long, output := 0, 0
	for _, l := range log {
		if len(l) > taxonomy.LocalBuildLogLineBytes {
			long++
		}
		if strings.HasPrefix(l, "line ") || strings.TrimSpace(l) == "" && len(l) > 0 {
			output++
		}
	}
	if long > 0 {
		t.Fatalf("%d build log lines are longer than LOCAL_BUILD_LOG_LINE_BYTES (%d)", long, taxonomy.LocalBuildLogLineBytes)
	}
	if output > taxonomy.LocalBuildLogLines {
		t.Fatalf("the build log kept %d lines of step output, past LOCAL_BUILD_LOG_LINES (%d)", output, taxonomy.LocalBuildLogLines)
	}
	joined := strings.Join(log, "\n")
	if !strings.Contains(joined, "LOCAL_BUILD_LOG_LINES") || !strings.Contains(joined, "guests run on it") {
		t.Fatalf("the log does not say what it did not keep, or the build did not finish: %s", joined[max(0, len(joined)-2000):])
	}
}

// BenchmarkBuildOutputWithoutNewlines builds, through the emulator, an
// image whose RUN prints 16 or 64 MiB without a newline (the issue-44.5
// flood) and reports the process's peak resident memory. Run each size in
// its own process for its own peak:
//
//	go test ./emulator/ -run '^$' -bench 'BuildOutputWithoutNewlines/16MiB' -benchtime 1x
func BenchmarkBuildOutputWithoutNewlines(b *testing.B) {
	for _, mib := range []int{16, 64} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				buildThroughServer(b, fmt.Sprintf("flood-%d-%d", mib, i), "FROM example.test/base:1\n"+noNewlines(mib<<10))
			}
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			b.ReportMetric(float64(ru.Maxrss)/1024, "peak-MB")
		})
	}
}
