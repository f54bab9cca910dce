package agentd

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
)

// Catches: an encoder that is not the standard alphabet with padding (URL or
// raw variants, a vector path that mishandles a tail); every length from 0
// to 300, across the SIMD path's minimum, with random contents must match
// the standard library.
func TestBase64MatchesStdEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 300; n++ {
		for range 20 {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(r.UintN(256))
			}
			want := base64.StdEncoding.EncodeToString(src)
			got := make([]byte, base64.StdEncoding.EncodedLen(n))
			encodeBase64(got, src)
			if string(got) != want {
				t.Fatalf("len %d: %q, want %q", n, got, want)
			}
			dec := make([]byte, n+8)
			m, err := decodeBase64(dec, got)
			if err != nil || !bytes.Equal(dec[:m], src) {
				t.Fatalf("len %d: benchmark decoder: %v", n, err)
			}
		}
	}
}

func FuzzBase64(f *testing.F) {
	f.Add([]byte("hello, world"))
	f.Fuzz(func(t *testing.T, src []byte) {
		got := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
		encodeBase64(got, src)
		if !bytes.Equal(got, []byte(base64.StdEncoding.EncodeToString(src))) {
			t.Fatalf("mismatch for %x", src)
		}
	})
}

func BenchmarkBase64Encode(b *testing.B) {
	src := make([]byte, maxEventBytes)
	dst := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
	b.SetBytes(int64(len(src)))
	b.Run("simd", func(b *testing.B) {
		for b.Loop() {
			encodeBase64(dst, src)
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		for b.Loop() {
			base64.StdEncoding.Encode(dst, src)
		}
	})
}
