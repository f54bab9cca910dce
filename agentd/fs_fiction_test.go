package agentd

import (
	"bytes"
	"os"
	"testing"
)

// A regular file whose stat size is 0 is read to its end, not announced as
// empty: on a filesystem that invents sizes and is missing from pseudoFS'
// list (a FUSE or 9p mount can say 0 for a file that has bytes), the
// size-0 test is what keeps its content. The test plays such a filesystem
// with /proc/self/cmdline (size 0, never empty) and the list switched off.
// Catches, in ReadFile, `info.Size() > 0` made `>= 0` (Content-Length: 0
// and an empty body).
func TestZeroSizedFileIsReadToItsEnd(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.srv.fs.sizeIsFiction = func(*os.File) bool { return false }
	want, err := os.ReadFile("/proc/self/cmdline") // the test binary's; the daemon runs in it
	if err != nil || len(want) == 0 {
		t.Skipf("no /proc/self/cmdline to read: %v", err)
	}
	status, body := d.rawGet(t, "/v1/fs/file?path=/proc/self/cmdline")
	if status != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET of a size-0 file with content: %d, %d bytes %q; want 200 and the %d bytes read locally", status, len(body), body, len(want))
	}
}
