package client

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
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

// The table the fast loop reads holds each alphabet character's six bits
// shifted into its place in a quantum, as b64Quad's comment says. Catches
// an entry stored at the wrong index (`256-c` for `256+c`, and the same at
// 512 and 768): the fast loop then finds every quantum invalid and hands
// all input to encoding/base64, so the output stays right and only the
// speed, which no other test sees, is lost.
func TestB64QuadTable(t *testing.T) {
	for i := range len(b64Alphabet) {
		c := int(b64Alphabet[i])
		for q := range 4 {
			if got, want := b64Quad[q*256+c], uint32(i)<<(18-6*q); got != want {
				t.Fatalf("b64Quad[%d*256+%q] = %#x, want %#x", q, rune(c), got, want)
			}
		}
	}
	n := 0
	for _, v := range b64Quad {
		if v != b64Invalid {
			n++
		}
	}
	if n != 4*64 {
		t.Fatalf("%d valid entries, want 256", n)
	}
}

// The fast loop stays inside dst and src: with dst exactly DecodedLen long
// inside a larger buffer, nothing past it is written, and with the spare
// room the stream parser gives (DecodedLen+16) nothing is read past src;
// either way the answer is encoding/base64's. Lengths 17 to 48 put the loop's
// end at every offset in a quantum, valid or not. Catches the loop's
// conditions changed: `len(src)-si` as `len(src)+si` (reads past src), the
// room test `len(dst)-di >= 14` negated or computed as `len(dst)+di`
// (writes past dst).
func TestB64DecodeStaysInItsSlices(t *testing.T) {
	for l := 17; l <= 48; l++ {
		src := make([]byte, l)
		for i := range src {
			src[i] = b64Alphabet[(i*7+l)%64]
		}
		want := make([]byte, base64.StdEncoding.DecodedLen(l))
		wn, werr := base64.StdEncoding.Decode(want, src)

		buf := bytes.Repeat([]byte{0xaa}, len(want)+32)
		n, err := b64Decode(buf[:len(want)], src)
		if n != wn || fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(buf[:n], want[:wn]) {
			t.Fatalf("length %d: %d %v, want %d %v", l, n, err, wn, werr)
		}
		if tail := buf[len(want):]; !bytes.Equal(tail, bytes.Repeat([]byte{0xaa}, 32)) {
			t.Fatalf("length %d: wrote past dst: %x", l, tail)
		}
		roomy := make([]byte, len(want)+16)
		if n, err := b64Decode(roomy, src); n != wn || fmt.Sprint(err) != fmt.Sprint(werr) || !bytes.Equal(roomy[:n], want[:wn]) {
			t.Fatalf("length %d with room: %d %v, want %d %v", l, n, err, wn, werr)
		}
	}
}

// CR or LF after the fast loop's part fails at its own offset in src.
// Catches the offset computed as `si - i`.
func TestB64DecodeNamesTheNewlinesOffset(t *testing.T) {
	src := []byte("AAAAAAAAAAAAAAAAAA\nA") // 16 for the loop, then the rest
	dst := make([]byte, 32)
	if _, err := b64Decode(dst, src); err != base64.CorruptInputError(18) {
		t.Fatalf("%v, want illegal data at input byte 18", err)
	}
}
