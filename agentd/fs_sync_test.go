package agentd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file write fsyncs only when the caller asks with ?sync=true, and then
// both the file and its directory, before the 204; without it (or with
// sync=false) the write ends in the page cache, whole and under its name.
// Catches: durability always on (the default write pays an fsync that cost
// two thirds of a 256 MiB upload on the shared ruler), durability never on
// (sync=true ignored, or the directory's fsync dropped), and a sync value
// that does not parse read as false instead of refused.
func TestWriteFileFsyncsOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name      string
		query     []string
		files     int // fsyncs of regular files
		dirs      int // fsyncs of directories
		status    int
		landsFile bool
	}{
		{"default", nil, 0, 0, 204, true},
		{"false", []string{"sync", "false"}, 0, 0, 204, true},
		{"true", []string{"sync", "true"}, 1, 1, 204, true},
		{"unparsable", []string{"sync", "maybe"}, 0, 0, 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, nil)
			d.bootstrap(nil)
			var files, dirs int
			d.srv.fs.fsync = func(file *os.File) error {
				st, err := file.Stat()
				if err != nil {
					t.Errorf("fsync of an unstatable file: %v", err)
					return err
				}
				if st.IsDir() {
					dirs++
				} else {
					files++
				}
				return file.Sync()
			}
			p := filepath.Join(t.TempDir(), "sub", "f.txt")
			ctx := context.Background()
			if tc.status == 400 {
				ctx = offContract(ctx) // malformed on purpose: only the response is held to the spec
			}
			r := daemonPutCtx(ctx, t, d, "/v1/fs/file", p, strings.NewReader("payload"), 7, tc.query...)
			if r.status != tc.status {
				t.Fatalf("status %d %q, want %d", r.status, r.body, tc.status)
			}
			if tc.status == 400 && r.body != syncNotBool {
				t.Fatalf("refusal says %q, want %q", r.body, syncNotBool)
			}
			if files != tc.files || dirs != tc.dirs {
				t.Fatalf("fsynced %d files and %d directories, want %d and %d", files, dirs, tc.files, tc.dirs)
			}
			b, err := os.ReadFile(p)
			switch {
			case tc.landsFile && string(b) != "payload":
				t.Fatalf("file holds %q (%v), want the payload", b, err)
			case !tc.landsFile && err == nil:
				t.Fatalf("a refused write left %q behind", b)
			}
		})
	}
}

// A failed fsync of a durable write answers 500 and leaves the old file:
// the caller asked for the bytes on disk and did not get them.
// Catches: the fsync's error ignored (a 204 for bytes the disk refused), or
// the file committed before its fsync.
func TestWriteFileFailedFsyncKeepsOldFile(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	d.srv.fs.fsync = func(*os.File) error { return os.ErrDeadlineExceeded }
	p := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := daemonPut(t, d, "/v1/fs/file", p, strings.NewReader("new"), 3, "sync", "true")
	if r.status != 500 {
		t.Fatalf("status %d %q, want 500", r.status, r.body)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("file holds %q, want the old bytes", b)
	}
}
