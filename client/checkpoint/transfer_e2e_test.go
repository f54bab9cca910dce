package checkpoint

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The object goes to the bucket while it is packed, under a staging key,
// unsigned over the emulator's plain http with the CRC32 the bucket
// verifies still on every part, in parts large enough that a 40 MiB object
// is three of them; then one server-side copy puts it under its digest and
// the staging key is gone.
// Catches: the SDK's sha256 pass per part coming back (the payload hash
// header would be hex), the part checksum dropped, the part size falling
// back to the transfer manager's 8 MiB default, the bytes sent a second
// time instead of copied, and a staging object left behind.
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
	staging := e.store.prefix() + "staging/"
	parts, copies, direct := 0, 0, 0
	for _, r := range e.emu.Server.Requests() {
		if r.Method != http.MethodPut {
			continue
		}
		path := strings.SplitN(r.Path, "?", 2)[0]
		h := http.Header(r.Header)
		switch {
		case strings.Contains(path, staging):
			parts++
			if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
				t.Errorf("part %d: x-amz-content-sha256 %q, want UNSIGNED-PAYLOAD", parts, got)
			}
			if h.Get("X-Amz-Checksum-Crc32") == "" {
				t.Errorf("part %d carries no CRC32: %v", parts, h)
			}
		case strings.HasSuffix(path, key) && h.Get("X-Amz-Copy-Source") != "":
			copies++
		case strings.HasSuffix(path, key):
			direct++
		}
	}
	if parts != 3 || copies != 1 || direct != 0 {
		t.Fatalf("the %d-byte object went up in %d staged parts (want 3 of %d bytes), %d copies (want 1), %d direct puts (want 0)", m.Size, parts, partBytes, copies, direct)
	}
	out, err := e.store.S3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(e.store.Bucket), Prefix: aws.String(staging)})
	if err != nil || len(out.Contents) != 0 {
		t.Fatalf("staging objects left: %v %v", err, out)
	}
	p, err := e.store.Prepare(ctx, m.Digest)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// Catches: an object over one CopyObject's limit copied whole (S3 refuses
// it over 5 GiB) instead of part by part, or its parts cut wrong (the
// digest a restore verifies would differ).
func TestLargeObjectIsCopiedInParts(t *testing.T) {
	old := maxCopyBytes
	maxCopyBytes = 5 << 20
	defer func() { maxCopyBytes = old }()
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	run(t, sb, "mkdir -p /tmp/big && head -c 12582912 /dev/urandom > /tmp/big/f")
	m, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/big"}})
	if err != nil {
		t.Fatal(err)
	}
	partCopies := 0
	for _, r := range e.emu.Server.Requests() {
		if r.Method == http.MethodPut && strings.Contains(r.RawQuery, "uploadId=") && http.Header(r.Header).Get("X-Amz-Copy-Source-Range") != "" {
			partCopies++
		}
	}
	if want := int((m.Size + maxCopyBytes - 1) / maxCopyBytes); partCopies != want {
		t.Fatalf("%d part copies of a %d-byte object, want %d", partCopies, m.Size, want)
	}
	p, err := e.store.Prepare(ctx, m.Digest) // verifies the digest
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}
