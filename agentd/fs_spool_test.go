package agentd

import (
	"bytes"
	"os"
	"testing"

	"github.com/microvms/microvms/agentd/internal/tartest"
	"github.com/microvms/microvms/gen/protocol"
)

// An upload's spool is one anonymous file, opened once and closed with the
// upload: twenty tar uploads leave the descriptor count where it was.
// Catches: openAnonymous ignoring its O_TMPFILE success (`err == nil`
// negated), which opens a named temp file as well and leaks the anonymous
// one, a descriptor and its disk space per upload for the daemon's life.
func TestTarUploadSpoolLeaksNoDescriptor(t *testing.T) {
	_, root, _ := tarLayout(t)
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	archive := tartest.Build(tartest.File("f", "x"))
	upload := func() {
		if r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(archive)); r.status != 204 {
			t.Fatalf("upload: %d %q", r.status, r.body)
		}
	}
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(es)
	}
	upload() // warm the connection
	before := count()
	for range 20 {
		upload()
	}
	if after := count(); after > before+3 {
		t.Fatalf("open descriptors grew from %d to %d over 20 uploads", before, after)
	}
}
