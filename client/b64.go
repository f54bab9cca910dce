package client

import (
	"encoding/base64"
	"encoding/binary"
)

// The stream's hot path is base64: every output byte arrives as 4/3 of a
// character. encoding/base64 decodes at about 1 GB/s here, which made the
// client, not the daemon, the bound on a stream's throughput. b64Decode is
// a table decoder about twice as fast, with the standard decoder's exact
// judgement of what is valid.

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// b64Invalid is set in a b64Quad entry for a byte outside the alphabet
// (padding, CR and LF included): the six bits of a valid entry never reach it.
const b64Invalid = 0xff000000

// b64Quad holds, for each of the four positions q in a quantum, at
// [q*256+c] every byte c's six bits already shifted into their place in the
// quantum's 24, or b64Invalid. 4 KiB: it stays in L1 beside the data. (One
// flat array, indexed from byte loads, keeps the loop's registers free: the
// compiler spills when it has four table bases or a shifted word to hold.)
var b64Quad = func() (t [4 * 256]uint32) {
	for c := range t {
		t[c] = b64Invalid
	}
	for i := range len(b64Alphabet) {
		c := int(b64Alphabet[i])
		t[c], t[256+c], t[512+c], t[768+c] = uint32(i)<<18, uint32(i)<<12, uint32(i)<<6, uint32(i)
	}
	return t
}()

// b64Decode decodes standard, padded base64 (base64.StdEncoding) from src
// into dst, which must hold base64.StdEncoding.DecodedLen(len(src)) bytes,
// and returns the bytes written. On input without CR or LF it accepts and
// rejects exactly what base64.StdEncoding.Decode does, padding rules
// included, with the same count, bytes and error. CR and LF, which the
// standard decoder skips, fail here (at the first of them): in a JSON string
// they are not base64 but a malformed payload.
//
// Whole quanta of alphabet characters are decoded sixteen characters to
// twelve bytes at a time; the rest (at most sixteen characters, the padding
// among them) and anything from the first byte outside the alphabet goes
// to the standard decoder, which judges it.
func b64Decode(dst, src []byte) (int, error) {
	t := &b64Quad
	di, si := 0, 0
	// Strictly more than 16 left: the last quantum, which may be padded,
	// always goes to the standard decoder. Each step writes 14 bytes (two
	// 8-byte stores, 12 of them kept), so dst needs that much room.
	for len(src)-si > 16 && len(dst)-di >= 14 {
		s := src[si : si+16 : si+16]
		a := t[s[0]] | t[256+int(s[1])] | t[512+int(s[2])] | t[768+int(s[3])]
		b := t[s[4]] | t[256+int(s[5])] | t[512+int(s[6])] | t[768+int(s[7])]
		c := t[s[8]] | t[256+int(s[9])] | t[512+int(s[10])] | t[768+int(s[11])]
		d := t[s[12]] | t[256+int(s[13])] | t[512+int(s[14])] | t[768+int(s[15])]
		if (a|b|c|d)&b64Invalid != 0 {
			break
		}
		o := dst[di : di+14 : di+14]
		binary.BigEndian.PutUint64(o, uint64(a)<<40|uint64(b)<<16)
		binary.BigEndian.PutUint64(o[6:], uint64(c)<<40|uint64(d)<<16)
		si += 16
		di += 12
	}
	rest := src[si:]
	for i, c := range rest {
		if c == '\r' || c == '\n' {
			return di, base64.CorruptInputError(si + i)
		}
	}
	n, err := base64.StdEncoding.Decode(dst[di:], rest)
	if e, ok := err.(base64.CorruptInputError); ok {
		err = base64.CorruptInputError(si + int(e))
	}
	return di + n, err
}
