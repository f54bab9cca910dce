package client_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/client"
)

// A download of endless data into a small filesystem stops before the
// disk is full, naming the free space, and leaves nothing behind; the
// filesystem keeps its reserve. It runs in a child in its own user and
// mount namespace, on a 16 MiB tmpfs only that child sees. Wrong edits
// caught: Download without the free-space guard (the copy runs to ENOSPC,
// taking the whole filesystem), and the guard counting the reserve wrong
// (the tmpfs ends full).
func TestDownloadStopsBeforeTheDiskFills(t *testing.T) {
	if os.Getenv("CLIENT_TEST_SMALL_FS") == "" {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("no unshare here")
		}
		cmd := exec.Command("unshare", "-Urm", os.Args[0], "-test.run=^TestDownloadStopsBeforeTheDiskFills$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "CLIENT_TEST_SMALL_FS=1")
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "SKIP-NS") {
			t.Skipf("no user and mount namespace here: %s", out)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("the child failed: %v\n%s", err, out)
		}
		return
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("SKIP-NS: mounting a tmpfs: %v", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	var h *hostile
	h = newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/fs/file": func(w http.ResponseWriter, r *http.Request) {
			h.endless(w, "", filled(1<<20, 'Z'))
		},
	})
	s := session(t, h.srv.URL, "tok")
	_, err := s.Download(testCtx(t), "/big", filepath.Join(dir, "big"), client.DownloadOptions{})
	wantBound(t, "endless data into 16 MiB", err, "the free space of "+dir)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused download left %v", ents)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Bfree*uint64(st.Bsize) < 15<<20 {
		t.Fatalf("the filesystem was not given back: %d bytes free (%v)", st.Bfree*uint64(st.Bsize), err)
	}
}
