package emulator

import (
	"bytes"
	"testing"
)

// FuzzDecodeAWSChunked feeds the aws-chunked decoder arbitrary bodies: it
// must never panic, never return more than its limit, and decode a
// well-formed body to its payload and trailers.
func FuzzDecodeAWSChunked(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"))
	f.Add([]byte("5;chunk-signature=abc\r\nhello\r\n0;chunk-signature=def\r\n\r\n"))
	f.Add([]byte("ffffffff\r\n"))
	f.Add([]byte("3\r\nab"))
	f.Add([]byte("0\r\nbad trailer\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, _, err := decodeAWSChunked(raw, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Fatalf("%d bytes past the limit", len(out))
		}
	})
}

// Catches: the chunk framing or a chunk signature kept in the payload, and
// a trailer checksum dropped.
func TestDecodeAWSChunked(t *testing.T) {
	out, tr, err := decodeAWSChunked([]byte("5;chunk-signature=abc\r\nhello\r\n6\r\n world\r\n0\r\nX-Amz-Checksum-Crc32:NhCmhg==\r\nx-amz-trailer-signature:zz\r\n\r\n"), 100)
	if err != nil || !bytes.Equal(out, []byte("hello world")) || tr["x-amz-checksum-crc32"] != "NhCmhg==" || len(tr) != 1 {
		t.Fatalf("%q %v %v", out, tr, err)
	}
	for _, bad := range []string{"5\r\nhel", "zz\r\n", "5\r\nhelloXX0\r\n\r\n", "65\r\n" + string(make([]byte, 101)) + "\r\n0\r\n\r\n"} {
		if _, _, err := decodeAWSChunked([]byte(bad), 100); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
