package checkpoint

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// The object goes to the bucket unsigned over the emulator's plain http,
// with the CRC32 the bucket verifies still on every part, in parts large
// enough that a 40 MiB object is three of them.
// Catches: the SDK's sha256 pass per part coming back (the payload hash
// header would be hex), the part checksum dropped, and the part size
// falling back to the transfer manager's 8 MiB default.
func TestObjectUploadIsUnsignedWithCRC32(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	run(t, sb, "mkdir -p /tmp/big && head -c 41943040 /dev/urandom > /tmp/big/f")
	m, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/big"}})
	if err != nil {
		t.Fatal(err)
	}
	key := e.store.objectKey(m.Digest)
	parts := 0
	for _, r := range e.emu.Server.Requests() {
		if r.Method != http.MethodPut || !strings.HasSuffix(strings.SplitN(r.Path, "?", 2)[0], key) {
			continue
		}
		parts++
		h := http.Header(r.Header)
		if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
			t.Errorf("part %d: x-amz-content-sha256 %q, want UNSIGNED-PAYLOAD", parts, got)
		}
		if h.Get("X-Amz-Checksum-Crc32") == "" {
			t.Errorf("part %d carries no CRC32: %v", parts, h)
		}
	}
	if parts != 3 {
		t.Fatalf("the %d-byte object went up in %d requests, want 3 parts of %d bytes", m.Size, parts, partBytes)
	}
	p, err := e.store.Prepare(ctx, m.Digest)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}
