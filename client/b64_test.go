package client

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"testing"
)

// checkB64 decodes src with b64Decode and with the standard library and
// fails unless they agree: on input with CR or LF b64Decode must fail; on
// any other input the count, the bytes written and the error must be the
// standard decoder's.
func checkB64(t *testing.T, src []byte) {
	t.Helper()
	n := base64.StdEncoding.DecodedLen(len(src))
	got, want := make([]byte, n), make([]byte, n)
	gn, gerr := b64Decode(got, src)
	if bytes.ContainsAny(src, "\r\n") {
		if gerr == nil {
			t.Fatalf("b64Decode(%q) accepted CR or LF", src)
		}
		return
	}
	wn, werr := base64.StdEncoding.Decode(want, src)
	if gn != wn || !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
		t.Fatalf("b64Decode(%q) = %d, %v; encoding/base64: %d, %v", src, gn, gerr, wn, werr)
	}
	if !bytes.Equal(got[:gn], want[:wn]) {
		t.Fatalf("b64Decode(%q) wrote %x; encoding/base64 wrote %x", src, got[:gn], want[:wn])
	}
}

func TestB64Decode(t *testing.T) {
	cases := []string{
		"", "=", "==", "A", "AA", "AA=", "AA==", "AAA=", "AAAA", "AAA", "AA==A", "AA==AAAA",
		"AAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAA==", "AAAAAAAAAAAAAAAAA===",
		"AAAAAAAAAAAAAAAA=AAA", "AAAAAAAA!AAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"",
		"AAAAAAAAAAAAAAAAAAAA\nAAAA", "AAAAAAAAAAAAAAAA\rAAAAAAAAAAAAAAAAAAAA", "aGk=\n", "\n",
		"YWJj" + string([]byte{0x80}) + "AAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAA=AAAAAAAAAAAAAAAAAAAAA",
	}
	for _, c := range cases {
		checkB64(t, []byte(c))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		raw := make([]byte, r.IntN(200))
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		enc := []byte(base64.StdEncoding.EncodeToString(raw))
		checkB64(t, enc)
		if len(enc) > 0 { // one byte changed to anything
			enc[r.IntN(len(enc))] = byte(r.Uint32())
			checkB64(t, enc)
		}
	}
}

// The decoded bytes of valid input, and that dst of exactly DecodedLen is
// enough (the fast loop must not write past it).
func TestB64DecodeExactDst(t *testing.T) {
	for size := range 300 {
		raw := bytes.Repeat([]byte{0xa5, 0x01, 0xff}, size)[:size]
		enc := []byte(base64.StdEncoding.EncodeToString(raw))
		dst := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		n, err := b64Decode(dst, enc)
		if err != nil || !bytes.Equal(dst[:n], raw) {
			t.Fatalf("size %d: %d, %v", size, n, err)
		}
	}
}

// FuzzB64Decode proves b64Decode equivalent to encoding/base64's
// StdEncoding on arbitrary input: same acceptance (padding rules included),
// count, bytes and error, except that CR and LF must fail.
func FuzzB64Decode(f *testing.F) {
	for _, s := range []string{"", "AA==", "AAA=", "aGk=", "AAAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAA==AAAA", "AAAAAAAAAAAAAAAAAAAAAAA\n", "////++++////++++////++=="} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		checkB64(t, src)
		// The same bytes inside a longer valid run, so the fast loop meets
		// them at every alignment.
		pre := bytes.Repeat([]byte("QUJD"), 5)
		for k := range 4 {
			s := append(append(append([]byte{}, pre...), src...), pre[:4*k]...)
			checkB64(t, s)
			s = append(append([]byte{}, pre[:1+k]...), src...)
			checkB64(t, s)
		}
	})
}

func benchmarkB64(b *testing.B, decode func(dst, src []byte) (int, error)) {
	raw := make([]byte, 48<<10)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	src := []byte(base64.StdEncoding.EncodeToString(raw))
	dst := make([]byte, len(raw)+16)
	b.SetBytes(int64(len(raw)))
	for range b.N {
		if n, err := decode(dst, src); err != nil || n != len(raw) {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkB64Decode is decoded bytes/s of one agentd-sized event (48 KiB of
// random bytes); BenchmarkB64Stdlib is the standard library on the same.
func BenchmarkB64Decode(b *testing.B) { benchmarkB64(b, b64Decode) }
func BenchmarkB64Stdlib(b *testing.B) { benchmarkB64(b, base64.StdEncoding.Decode) }
