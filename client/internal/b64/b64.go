package b64

import (
	"bytes"
	"encoding/base64"

	simdbase64 "github.com/segmentio/asm/base64"
)

// The stream's hot path is base64: every output byte arrives as 4/3 of a
// character, and encoding/base64 decodes at about 1 GB/s here, which would
// make the client, not the daemon, the bound on a stream's throughput.
// Decode decodes with segmentio/asm (AVX2 on amd64, NEON on arm64, the
// standard decoder elsewhere) and keeps the standard decoder's exact
// judgement of what is valid.

// Decode decodes standard, padded base64 (base64.StdEncoding) from src
// into dst, which must hold base64.StdEncoding.DecodedLen(len(src)) bytes,
// and returns the bytes written. On input without CR or LF it accepts and
// rejects exactly what base64.StdEncoding.Decode does, padding rules
// included, with the same count, bytes and error. CR and LF, which the
// standard decoder skips, fail here at the first of them: in a JSON string
// they are not base64 but a malformed payload.
func Decode(dst, src []byte) (int, error) {
	if i := indexCRLF(src); i >= 0 {
		return 0, base64.CorruptInputError(i)
	}
	n, err := simdbase64.StdEncoding.Decode(dst, src)
	if err != nil {
		// The vector decoder stops at the first block it cannot take and
		// hands the rest to encoding/base64, whose error offsets are then
		// relative to that rest; decoding again whole names the standard
		// offset and count. Only malformed input pays for it.
		return base64.StdEncoding.Decode(dst, src)
	}
	return n, nil
}

// indexCRLF is the offset of the first CR or LF in b, or -1.
func indexCRLF(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if j := bytes.IndexByte(b, '\r'); j >= 0 && (i < 0 || j < i) {
		i = j
	}
	return i
}
