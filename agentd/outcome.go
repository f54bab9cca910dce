package agentd

import (
	"bufio"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/microvms/microvms/gen/protocol"
)

// outcomeBufferBytes is what one poll or ack body costs the daemon while it
// is written, whatever the output's size: the heads are encoded from where
// they are held straight into this buffer, never into a copy of the body.
const outcomeBufferBytes = 32 << 10

// outcomeWriters recycles the outcome buffers. Every exec's ack (and every
// exited poll) writes one, and a fresh 32 KiB each time was most of what a
// short exec allocated: at /bin/true rates the collector ran every few execs.
var outcomeWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, outcomeBufferBytes) }}

// writeOutcome streams an exited poll or an ack. The body is the JSON of
// the exited PollResponse (exit_code null, not omitted, for a signal), but built as it is written: a head of 8 MiB
// of NUL bytes is 48 MiB of JSON, and eight polls building that whole were
// gigabytes. Output is lossy on purpose, exactly as strings.ToValidUTF8 with
// U+FFFD: each run of invalid bytes becomes one replacement character (a cap
// can land mid-character, and a strict decode would turn "printed a lot" into
// "lost your output"; the stream has the exact bytes).
func writeOutcome(w http.ResponseWriter, id string, phase protocol.Phase, stdout, stderr head, st exitStatus) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := outcomeWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil) // drop the connection; the buffer is all the pool keeps
		outcomeWriters.Put(bw)
	}()
	e := jsonText{w: bw}
	bw.WriteString(`{"exec_id":`)
	e.string([][]byte{[]byte(id)})
	bw.WriteString(`,"phase":`)
	e.string([][]byte{[]byte(phase)})
	bw.WriteString(`,"exit_code":`)
	writeOptInt(bw, st.code)
	bw.WriteString(`,"signal":`)
	writeOptInt(bw, st.signal)
	bw.WriteString(`,"stdout":`)
	e.string(stdout.chunks)
	bw.WriteString(`,"stderr":`)
	e.string(stderr.chunks)
	bw.WriteString(`,"truncated":`)
	bw.WriteString(strconv.FormatBool(st.truncated))
	bw.WriteString(`,"writers_may_be_alive":`)
	bw.WriteString(strconv.FormatBool(st.writersMayBeAlive))
	bw.WriteString("}\n")
	_ = bw.Flush()
}

func writeOptInt(bw *bufio.Writer, v *int32) {
	if v == nil {
		bw.WriteString("null")
		return
	}
	bw.WriteString(strconv.FormatInt(int64(*v), 10))
}

// jsonText writes bytes as one JSON string, incrementally.
type jsonText struct {
	w       *bufio.Writer
	invalid bool // the last thing written was a replacement for invalid bytes
	window  [64<<10 + utf8.UTFMax]byte
}

const hexDigits = "0123456789abcdef"

// string writes the concatenation of chunks as a quoted JSON string. A
// character split across two chunks is carried over in a small window.
func (e *jsonText) string(chunks [][]byte) {
	e.w.WriteByte('"')
	e.invalid = false
	buf := e.window[:0]
	for _, c := range chunks {
		for len(c) > 0 {
			n := copy(e.window[len(buf):], c)
			buf = e.window[:len(buf)+n]
			c = c[n:]
			if len(buf) == len(e.window) {
				k := e.encode(buf, false)
				m := copy(e.window[:], buf[k:])
				buf = e.window[:m]
			}
		}
	}
	e.encode(buf, true)
	e.w.WriteByte('"')
}

// encode escapes p and returns how much of it was consumed: all of it when
// final, otherwise all but an incomplete character at the end.
func (e *jsonText) encode(p []byte, final bool) int {
	start := 0 // first byte not yet written
	i := 0
	for i < len(p) {
		b := p[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				e.invalid = false
				continue
			}
			e.w.Write(p[start:i])
			switch b {
			case '"', '\\':
				e.w.WriteByte('\\')
				e.w.WriteByte(b)
			case '\n':
				e.w.WriteString(`\n`)
			case '\r':
				e.w.WriteString(`\r`)
			case '\t':
				e.w.WriteString(`\t`)
			default:
				e.w.WriteString(`\u00`)
				e.w.WriteByte(hexDigits[b>>4])
				e.w.WriteByte(hexDigits[b&0xf])
			}
			i++
			start = i
			e.invalid = false
			continue
		}
		if !final && !utf8.FullRune(p[i:]) {
			break
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			e.w.Write(p[start:i])
			if !e.invalid {
				e.w.WriteString(`\ufffd`)
				e.invalid = true
			}
			i++
			start = i
			continue
		}
		e.invalid = false
		if r == '\u2028' || r == '\u2029' {
			// Valid JSON either way; escaped as encoding/json does, so the
			// body is also safe inside JavaScript.
			e.w.Write(p[start:i])
			e.w.WriteString(`\u202`)
			e.w.WriteByte(hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	e.w.Write(p[start:i])
	return i
}
