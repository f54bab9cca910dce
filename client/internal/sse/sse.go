package sse

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/microvms/microvms/client/internal/b64"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Kind is the kind of one event. Any event name but these three, which
// agentd sends, is dropped.
type Kind uint8

const (
	// Output is a chunk of stdout or stderr.
	Output Kind = 1 + iota
	// Gap is a range of bytes the reader will never see.
	Gap
	// Exit is the exec's end; it is always last.
	Exit
)

// kindNames are the event names on the wire, by kind.
var kindNames = [...]string{Output: protocol.EventOutput, Gap: protocol.EventGap, Exit: protocol.EventExit}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one decoded event; the field its Kind names is set.
type Event struct {
	Kind Kind
	Out  Chunk              // Output
	Gap  protocol.GapEvent  // Gap: [From, To) is lost
	Exit protocol.ExitEvent // Exit
}

// Chunk is an output event's bytes: Data, decoded, is only valid until the
// next call to Parser.Next (the parser reuses one buffer, so reading does not
// allocate per chunk), and Data[0] is at Offset in the exec's shared byte
// space.
type Chunk struct {
	Stream protocol.StreamKind // stdout or stderr
	Offset uint64
	Data   []byte
}

// Parser splits an SSE body into frames and decodes agentd's three event
// payloads. Lines are read in place from a bufio.Reader. A frame whose one
// data line is followed at once by the blank line (every frame agentd sends)
// is parsed where it lies, in the reader's buffer; any other frame's data is
// assembled in a reused buffer. Base64 is decoded into another reused
// buffer, so steady-state parsing does no allocation per byte or per event.
type Parser struct {
	r    *bufio.Reader
	long []byte // a line longer than the bufio buffer, assembled here
	data []byte // the current frame's data field, when it is not in place
	out  []byte // decoded output bytes
	name Kind
	// sawName is true when the frame named an event at all; a frame with an
	// unknown name is dropped, while a nameless frame is SSE's default
	// "message", which agentd does not send and is dropped too.
	sawName bool
	unknown bool
	hasData bool
	// MaxLine and MaxEvent bound a line and one event's gathered data;
	// zero means taxonomy.MaxSSELineBytes and MaxSSEEventBytes. Past
	// either, Next returns a *LimitError and the parser is spent.
	MaxLine, MaxEvent int
}

// LimitError is a line or an event's data past the parser's bound: a body
// no conforming daemon sends, and one that would otherwise grow without
// end. Key names the bound's constant.
type LimitError struct {
	What  string // "a line" or "an event's data"
	Key   string // MAX_SSE_LINE_BYTES or MAX_SSE_EVENT_BYTES
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is over %s (%d bytes)", e.What, e.Key, e.Limit)
}

// BufferSize is the size of a Parser's read buffer: a frame's data line up
// to this long is parsed in place.
const BufferSize = 256 << 10

// NewParser reads events from r.
func NewParser(r io.Reader) *Parser {
	return &Parser{r: bufio.NewReaderSize(r, BufferSize)}
}

func (p *Parser) maxLine() int {
	if p.MaxLine > 0 {
		return p.MaxLine
	}
	return taxonomy.MaxSSELineBytes
}

func (p *Parser) maxEvent() int {
	if p.MaxEvent > 0 {
		return p.MaxEvent
	}
	return taxonomy.MaxSSEEventBytes
}

func (p *Parser) lineTooLong() error {
	return &LimitError{What: "a line", Key: "MAX_SSE_LINE_BYTES", Limit: p.maxLine()}
}

// Reset makes p read from r, as a new Parser would, keeping its buffers.
func (p *Parser) Reset(r io.Reader) {
	p.r.Reset(r)
	p.resetFrame()
}

func (p *Parser) resetFrame() {
	p.data, p.name, p.sawName, p.unknown, p.hasData = p.data[:0], 0, false, false, false
}

// readLine returns the next line without its terminator. The slice is valid
// until the next call.
func (p *Parser) readLine() ([]byte, error) {
	line, err := p.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		p.long = append(p.long[:0], line...)
		for err == bufio.ErrBufferFull {
			// Checked before each append, so an endless line costs at
			// most MaxLine plus one buffer, never more.
			if len(p.long) > p.maxLine() {
				return nil, p.lineTooLong()
			}
			line, err = p.r.ReadSlice('\n')
			p.long = append(grow(p.long, len(line), p.maxLine()+len(line)), line...)
		}
		line = p.long
	}
	if err != nil {
		// A final line without a newline is an incomplete frame: the body was
		// cut. Reporting it as a clean end would make a cut look finished.
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > p.maxLine() {
		return nil, p.lineTooLong()
	}
	return line, nil
}

var (
	fieldEvent = []byte("event")
	fieldData  = []byte("data")
	nameOutput = []byte(protocol.EventOutput)
	nameGap    = []byte(protocol.EventGap)
	nameExit   = []byte(protocol.EventExit)
)

// nextFrame reads until a blank line completes a frame with a known event
// name and data, and returns its kind and data. Comments (keepalives),
// unknown events, and id/retry fields are skipped. At the end of the body it
// returns io.EOF (clean frame boundary) or io.ErrUnexpectedEOF.
func (p *Parser) nextFrame() (Kind, []byte, error) {
	for {
		line, err := p.readLine()
		if err != nil {
			if err == io.EOF && (p.hasData || p.sawName) {
				err = io.ErrUnexpectedEOF
			}
			p.resetFrame()
			return 0, nil, err
		}
		if len(line) == 0 {
			kind, ok := p.name, p.sawName && !p.unknown && p.hasData
			data := p.data
			p.resetFrame()
			if ok {
				return kind, data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: agentd's keepalive
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch {
		case bytes.Equal(field, fieldEvent):
			p.sawName = true
			switch {
			case bytes.Equal(value, nameOutput):
				p.name, p.unknown = Output, false
			case bytes.Equal(value, nameGap):
				p.name, p.unknown = Gap, false
			case bytes.Equal(value, nameExit):
				p.name, p.unknown = Exit, false
			default:
				p.unknown = true
			}
		case bytes.Equal(field, fieldData):
			if !p.hasData && p.sawName && !p.unknown && p.endsFrame() {
				// The frame's only data line: hand it out in place. It stays
				// valid until the next read, and the caller is done with it
				// by then.
				kind := p.name
				p.resetFrame()
				return kind, value, nil
			}
			if len(p.data)+1+len(value) > p.maxEvent() {
				// Endless data lines without the blank line that ends the
				// event: refused before they are gathered.
				return 0, nil, &LimitError{What: "an event's data", Key: "MAX_SSE_EVENT_BYTES", Limit: p.maxEvent()}
			}
			p.data = grow(p.data, 1+len(value), p.maxEvent())
			if p.hasData {
				p.data = append(p.data, '\n')
			}
			p.data = append(p.data, value...)
			p.hasData = true
		}
	}
}

// grow makes room for n more bytes in b, doubling its capacity but never
// past limit, so a buffer gathered up to its bound costs at most twice the
// bound in allocations (append alone grows large slices by a quarter at a
// time, five times the bound in all).
func grow(b []byte, n, limit int) []byte {
	need := len(b) + n
	if need <= cap(b) {
		return b
	}
	nb := make([]byte, len(b), max(min(2*cap(b), limit), need, 4096))
	copy(nb, b)
	return nb
}

// endsFrame consumes the blank line that ends the frame if it is already
// in the reader's buffer, so reading it cannot move the line just read.
// When it is not buffered yet (or another line comes first) it reports
// false and reads nothing: the caller copies the data and reads on.
func (p *Parser) endsFrame() bool {
	n := p.r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := p.r.Peek(min(n, 2)) // within the buffered bytes: no read, no move
	switch {
	case b[0] == '\n':
		_, _ = p.r.Discard(1)
		return true
	case len(b) == 2 && b[0] == '\r' && b[1] == '\n':
		_, _ = p.r.Discard(2)
		return true
	}
	return false
}

// Next reads the next known event into ev and decodes its payload. At the
// end of the body it returns io.EOF (clean frame boundary) or
// io.ErrUnexpectedEOF; a payload agentd would never send is a
// *MalformedError; a line or an event's data over MaxLine or MaxEvent is a
// *LimitError.
func (p *Parser) Next(ev *Event) error {
	kind, data, err := p.nextFrame()
	if err != nil {
		return err
	}
	*ev = Event{Kind: kind}
	switch kind {
	case Output:
		off, stream, enc, ok := scanOutput(data)
		if ok {
			if n, err := p.decode(enc, b64.Decode); err == nil {
				ev.Out = Chunk{Stream: stream, Offset: off, Data: p.out[:n]}
				return nil
			}
		}
		// The slow path: anything the scanner declined, including a payload
		// whose output has JSON escapes, goes through encoding/json.
		var o protocol.OutputEvent
		if err := json.Unmarshal(data, &o); err != nil {
			return malformedEvent(kind, err)
		}
		if o.Stream != protocol.StreamStdout && o.Stream != protocol.StreamStderr {
			return malformedEvent(kind, fmt.Errorf("stream %q is neither stdout nor stderr", o.Stream))
		}
		n, err := p.decode([]byte(o.Output), base64.StdEncoding.Decode)
		if err != nil {
			return malformedEvent(kind, fmt.Errorf("output is not base64: %w", err))
		}
		ev.Out = Chunk{Stream: o.Stream, Offset: o.Offset, Data: p.out[:n]}
	case Gap, Exit:
		return DecodeEnd(kind, data, ev)
	}
	return nil
}

// DecodeEnd decodes the JSON payload of a Gap or Exit event into ev, which
// it sets whole. Binary frames carry these two payloads as JSON too, so the
// frame reader decodes them here, to the same rules.
func DecodeEnd(kind Kind, data []byte, ev *Event) error {
	*ev = Event{Kind: kind}
	switch kind {
	case Gap:
		if err := json.Unmarshal(data, &ev.Gap); err != nil {
			return malformedEvent(kind, err)
		}
		if ev.Gap.To < ev.Gap.From {
			return malformedEvent(kind, fmt.Errorf("gap [%d, %d) ends before it starts", ev.Gap.From, ev.Gap.To))
		}
	case Exit:
		if err := json.Unmarshal(data, &ev.Exit); err != nil {
			return malformedEvent(kind, err)
		}
	}
	return nil
}

// ErrMalformed marks a frame agentd should never send; a stream fails
// rather than reconnecting into the same bytes.
var ErrMalformed = errors.New("malformed SSE event")

// MalformedError is a frame of a known kind whose payload does not decode:
// Err says why. It wraps ErrMalformed and Err.
type MalformedError struct {
	Kind Kind
	Err  error
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("a %s event is malformed: %v", e.Kind, errors.Join(ErrMalformed, e.Err))
}

func (e *MalformedError) Unwrap() []error { return []error{ErrMalformed, e.Err} }

func malformedEvent(kind Kind, err error) error {
	return &MalformedError{Kind: kind, Err: err}
}

// scanOutput is the allocation-free fast path for the one hot payload,
// {"offset":N,"stream":"stdout","output":"<base64>"} in any key order. It
// gives up (ok false) on anything else — escapes, unknown keys, odd
// whitespace — and the caller falls back to encoding/json.
func scanOutput(b []byte) (offset uint64, stream protocol.StreamKind, b64 []byte, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, "", nil, false
	}
	var seen uint8
	for {
		i = skipWS(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return 0, "", nil, false
		}
		key, j, good := scanString(b, i)
		if !good {
			return 0, "", nil, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return 0, "", nil, false
		}
		i = skipWS(b, i+1)
		switch string(key) { // the compiler does not allocate for this conversion
		case "offset":
			if seen&1 != 0 {
				return 0, "", nil, false
			}
			seen |= 1
			start := i
			var v uint64
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				d := uint64(b[i] - '0')
				if v > (1<<64-1-d)/10 {
					return 0, "", nil, false
				}
				v = v*10 + d
				i++
			}
			if i == start || (b[start] == '0' && i-start > 1) {
				return 0, "", nil, false
			}
			offset = v
		case "stream":
			if seen&2 != 0 || i >= len(b) || b[i] != '"' {
				return 0, "", nil, false
			}
			seen |= 2
			s, j, good := scanString(b, i)
			if !good {
				return 0, "", nil, false
			}
			switch string(s) {
			case "stdout":
				stream = protocol.StreamStdout
			case "stderr":
				stream = protocol.StreamStderr
			default:
				return 0, "", nil, false
			}
			i = j
		case "output":
			if seen&4 != 0 || i >= len(b) || b[i] != '"' {
				return 0, "", nil, false
			}
			seen |= 4
			// Not validated byte by byte: the caller's base64 decode rejects
			// anything outside the alphabet, and falls back to encoding/json
			// when it does. That also lets the end be found without a pass
			// over the whole string: agentd sends output last, so once the
			// other two keys are read the string should end at the
			// payload's last quote. If it ends sooner, the slice holds a
			// quote, which is not base64, and the caller falls back.
			var end int
			if seen == 7 {
				end = bytes.LastIndexByte(b[i+1:], '"')
			} else {
				end = bytes.IndexByte(b[i+1:], '"')
			}
			if end < 0 {
				return 0, "", nil, false
			}
			b64, i = b[i+1:i+1+end], i+1+end+1
		default:
			return 0, "", nil, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, "", nil, false
		}
		if b[i] == '}' {
			if seen != 7 || skipWS(b, i+1) != len(b) {
				return 0, "", nil, false
			}
			return offset, stream, b64, true
		}
		if b[i] != ',' {
			return 0, "", nil, false
		}
	}
}

// decode base64-decodes b64 into the reused output buffer: with b64.Decode
// on the fast path, which fails on CR and LF (in a raw JSON string they are
// invalid, so encoding/json judges those payloads), and with the standard
// decoder on the unescaped string of the slow path.
func (p *Parser) decode(b64 []byte, decode func(dst, src []byte) (int, error)) (int, error) {
	// Slack past DecodedLen, so a decoder's last vector store always fits.
	if n := base64.StdEncoding.DecodedLen(len(b64)) + 16; cap(p.out) < n {
		p.out = make([]byte, n)
	}
	return decode(p.out[:cap(p.out)], b64)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the contents of the JSON string starting at b[i] == '"'
// and the index after its closing quote. Escapes and control characters
// and non-ASCII bytes (which encoding/json would rewrite as U+FFFD when
// they are not valid UTF-8; base64 never contains them) are declined,
// leaving them to encoding/json.
func scanString(b []byte, i int) ([]byte, int, bool) {
	rest := b[i+1:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, 0, false
	}
	s := rest[:end]
	for _, c := range s {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, 0, false
		}
	}
	return s, i + 1 + end + 1, true
}
