package agentd

import (
	"bufio"
	"encoding/binary"
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

// outcomeWriter is the working memory of one outcome body: the output
// buffer and the JSON string encoder's 68 KiB of windows.
type outcomeWriter struct {
	bw   *bufio.Writer
	text jsonText
}

// outcomeWriters recycles the outcome buffers and encoders. Every exec's ack
// (and every exited poll) writes one. A fresh 32 KiB buffer each time was
// most of what a short exec allocated, and with it pooled the encoder
// (which escapes to the heap: its windows are too large for the stack) was
// 74 KiB of the 180 KiB a polled /bin/true allocated; at /bin/true rates the
// collector ran every few execs.
var outcomeWriters = sync.Pool{New: func() any {
	o := &outcomeWriter{bw: bufio.NewWriterSize(nil, outcomeBufferBytes)}
	o.text.w = o.bw
	return o
}}

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
	o := outcomeWriters.Get().(*outcomeWriter)
	bw, e := o.bw, &o.text
	bw.Reset(w)
	defer func() {
		bw.Reset(nil) // drop the connection; the buffers are all the pool keeps
		outcomeWriters.Put(o)
	}()
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
	if st.usage != nil {
		bw.WriteString(`,"usage":`)
		bw.Write(appendUsage(bw.AvailableBuffer(), st.usage))
		bw.WriteString(`,"oom_killed":`)
		bw.WriteString(strconv.FormatBool(st.oomKilled))
	}
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
	// scratch gathers the escapes of a run of bytes that need them, so such
	// a run costs one buffered write per 4 KiB instead of four per byte.
	scratch [4 << 10]byte
}

const hexDigits = "0123456789abcdef"

// jsonEscape is how each ASCII byte is written inside a JSON string: empty
// for a byte written as itself, else its escape (\n, \r, \t, \", \\ and
// \u00XX for the other controls, as poll bodies have always carried them).
var jsonEscape = func() (t [utf8.RuneSelf]string) {
	for b := 0; b < 0x20; b++ {
		t[b] = `\u00` + string(hexDigits[b>>4]) + string(hexDigits[b&0xf])
	}
	t['\n'], t['\r'], t['\t'] = `\n`, `\r`, `\t`
	t['"'], t['\\'] = `\"`, `\\`
	return t
}()

// escapeWord and escapeLen are jsonEscape packed for the escape loop: each
// escape (at most six bytes) little-endian in a word, and its length. An
// 8 MiB head of NUL bytes is 48 MiB of \u0000, written after every stream of
// a zero-filled output; appending the strings one by one spent 2.6 ns a byte.
var escapeWord, escapeLen = func() (w [utf8.RuneSelf]uint64, n [utf8.RuneSelf]uint8) {
	for b, esc := range jsonEscape {
		var word [8]byte
		copy(word[:], esc)
		w[b], n[b] = binary.LittleEndian.Uint64(word[:]), uint8(len(esc))
	}
	return w, n
}()

// jsonPlain marks the bytes written as themselves: ASCII with no escape. One
// bool per byte keeps the scan over ordinary text to a load and a branch.
var jsonPlain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = jsonEscape[b] == ""
	}
	return t
}()

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
//
// Bytes are written in runs: p[start:i] is always valid text not yet
// written, so a run ends only at a byte that needs an escape or a
// replacement. A pending run also means the last thing written is no longer
// a replacement, which is how invalid is kept without a store per byte.
func (e *jsonText) encode(p []byte, final bool) int {
	start := 0 // first byte not yet written
	i := 0
	for i < len(p) {
		if jsonPlain[p[i]] {
			i++
			continue
		}
		if p[i] < utf8.RuneSelf {
			e.w.Write(p[start:i])
			j := 0
			for i < len(p) && p[i] < utf8.RuneSelf && !jsonPlain[p[i]] {
				if j > len(e.scratch)-8 {
					e.w.Write(e.scratch[:j])
					j = 0
				}
				// One 8-byte store per escape; only its first escapeLen
				// bytes count, the rest is overwritten by the next.
				binary.LittleEndian.PutUint64(e.scratch[j:], escapeWord[p[i]])
				j += int(escapeLen[p[i]])
				i++
			}
			e.w.Write(e.scratch[:j])
			start = i
			e.invalid = false
			continue
		}
		if !final && !utf8.FullRune(p[i:]) {
			break
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			if start < i {
				e.w.Write(p[start:i])
				e.invalid = false
			}
			if !e.invalid {
				e.w.WriteString(`\ufffd`)
				e.invalid = true
			}
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			// Valid JSON either way; escaped as encoding/json does, so the
			// body is also safe inside JavaScript.
			e.w.Write(p[start:i])
			e.w.WriteString(`\u202`)
			e.w.WriteByte(hexDigits[r&0xf])
			e.invalid = false
			i += size
			start = i
			continue
		}
		i += size
	}
	if start < i {
		e.w.Write(p[start:i])
		e.invalid = false
	}
	return i
}

// appendUsage appends u as the JSON of protocol.ExecUsage, by hand: it is in
// every exited poll and ack, and reflection there would cost the exec fast
// path an encoder for a handful of numbers.
func appendUsage(b []byte, u *protocol.ExecUsage) []byte {
	b = append(b, `{"source":`...)
	b = appendJSONASCII(b, string(u.Source))
	b = append(b, `,"wall_secs":`...)
	b = strconv.AppendFloat(b, u.WallSecs, 'f', -1, 64)
	b = append(b, `,"user_cpu_secs":`...)
	b = strconv.AppendFloat(b, u.UserCPUSecs, 'f', -1, 64)
	b = append(b, `,"system_cpu_secs":`...)
	b = strconv.AppendFloat(b, u.SystemCPUSecs, 'f', -1, 64)
	b = append(b, `,"peak_memory_bytes":`...)
	b = strconv.AppendUint(b, u.PeakMemoryBytes, 10)
	b = append(b, `,"stdout_bytes":`...)
	b = strconv.AppendUint(b, u.StdoutBytes, 10)
	b = append(b, `,"stderr_bytes":`...)
	b = strconv.AppendUint(b, u.StderrBytes, 10)
	if u.PeakProcesses != nil {
		b = append(b, `,"peak_processes":`...)
		b = strconv.AppendUint(b, *u.PeakProcesses, 10)
	}
	b = append(b, `,"missing":[`...)
	for i, m := range u.Missing {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONASCII(b, m)
	}
	return append(b, "]}"...)
}

// appendJSONASCII quotes s, which is the daemon's own text (valid UTF-8):
// only quotes, backslashes and controls need escapes.
func appendJSONASCII(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
