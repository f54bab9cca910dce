package b64

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// checkB64 decodes src with Decode and with the standard library and
// fails unless they agree: on input with CR or LF Decode must fail; on
// any other input the count, the bytes written and the error must be the
// standard decoder's.
func checkB64(t *testing.T, src []byte) {
	t.Helper()
	n := base64.StdEncoding.DecodedLen(len(src))
	got, want := make([]byte, n), make([]byte, n)
	gn, gerr := Decode(got, src)
	if bytes.ContainsAny(src, "\r\n") {
		if gerr == nil {
			t.Fatalf("Decode(%q) accepted CR or LF", src)
		}
		return
	}
	wn, werr := base64.StdEncoding.Decode(want, src)
	if gn != wn || !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
		t.Fatalf("Decode(%q) = %d, %v; encoding/base64: %d, %v", src, gn, gerr, wn, werr)
	}
	if !bytes.Equal(got[:gn], want[:wn]) {
		t.Fatalf("Decode(%q) wrote %x; encoding/base64 wrote %x", src, got[:gn], want[:wn])
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
		n, err := Decode(dst, enc)
		if err != nil || !bytes.Equal(dst[:n], raw) {
			t.Fatalf("size %d: %d, %v", size, n, err)
		}
	}
}

// FuzzB64Decode proves Decode equivalent to encoding/base64's
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
func BenchmarkB64Decode(b *testing.B) { benchmarkB64(b, Decode) }
func BenchmarkB64Stdlib(b *testing.B) { benchmarkB64(b, base64.StdEncoding.Decode) }

// The vector decoder stays inside dst: with dst exactly DecodedLen long
// inside a larger buffer, nothing past it is written, and with the spare
// room the stream parser gives (DecodedLen+16) the answer is the same;
// either way it is encoding/base64's. Lengths 17 to 112 put the vector
// path's end (32 or 45 characters a step) at every offset in a quantum.
// Catches a decoder that writes its last vector store whole past dst.
func TestB64DecodeStaysInItsSlices(t *testing.T) {
	for l := 17; l <= 112; l++ {
		src := make([]byte, l)
		for i := range src {
			src[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i*7+l)%64]
		}
		want := make([]byte, base64.StdEncoding.DecodedLen(l))
		wn, werr := base64.StdEncoding.Decode(want, src)

		buf := bytes.Repeat([]byte{0xaa}, len(want)+32)
		n, err := Decode(buf[:len(want)], src)
		if n != wn || fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(buf[:n], want[:wn]) {
			t.Fatalf("length %d: %d %v, want %d %v", l, n, err, wn, werr)
		}
		if tail := buf[len(want):]; !bytes.Equal(tail, bytes.Repeat([]byte{0xaa}, 32)) {
			t.Fatalf("length %d: wrote past dst: %x", l, tail)
		}
		roomy := make([]byte, len(want)+16)
		if n, err := Decode(roomy, src); n != wn || fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(roomy[:n], want[:wn]) {
			t.Fatalf("length %d with room: %d %v, want %d %v", l, n, err, wn, werr)
		}
	}
}

// CR or LF fails at its own offset in src, even after a long valid run.
// Catches a decoder that lets encoding/base64 skip them (it does), or that
// names the offset within the undecoded rest.
func TestB64DecodeNamesTheNewlinesOffset(t *testing.T) {
	src := []byte(strings.Repeat("A", 64) + "\rA\nAA")
	dst := make([]byte, 64)
	if _, err := Decode(dst, src); err != base64.CorruptInputError(64) {
		t.Fatalf("%v, want illegal data at input byte 64", err)
	}
}
