// Command framesverdict is the Go frame reader's verdicts for the Python and
// TypeScript clients' differential tests: it prints, as JSON, a corpus of
// bodies (FuzzFrames' seeds, its committed corpus under
// internal/frames/testdata/fuzz when there is one, the writer's own output
// for each seed, hostile edges and a fixed pseudo-random sample) together
// with what internal/frames.Reader makes of each: the frames it hands out and
// how the body ends (eof, cut or malformed). The other readers must agree
// byte for byte.
//
// It is a test tool: it reads only the corpus directory it is given and
// writes only to stdout, and it must never import anything but the reader it
// speaks for, so the verdicts are the Go reader's alone.
package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/internal/frames"
)

type verdictFrame struct {
	Type    uint8  `json:"type"`
	Offset  string `json:"offset"` // decimal: a uint64 does not fit a JSON number everywhere
	Payload string `json:"payload"`
}

type verdict struct {
	Name   string         `json:"name"`
	Body   string         `json:"body"`
	Frames []verdictFrame `json:"frames"`
	End    string         `json:"end"`
}

// judge reads body with the Go reader through buffer size size.
func judge(body []byte, size int) ([]verdictFrame, string) {
	r := frames.NewReader(bytes.NewReader(body), size)
	out := []verdictFrame{}
	for range len(body) + 1 {
		f, err := r.Next()
		switch {
		case err == io.EOF:
			return out, "eof"
		case err == io.ErrUnexpectedEOF:
			return out, "cut"
		case errors.Is(err, frames.ErrMalformed):
			return out, "malformed"
		case err != nil:
			panic(err)
		}
		out = append(out, verdictFrame{Type: f.Type, Offset: strconv.FormatUint(f.Offset, 10), Payload: hex.EncodeToString(f.Payload)})
	}
	panic("more frames than bytes")
}

// pieces is FuzzFrames' own cutting of fuzz data into frames (frames_test.go).
func pieces(data []byte) []byte {
	var body []byte
	off := uint64(0)
	for len(data) >= 2 {
		typ := data[0] % (protocol.FrameExit + 1)
		n := min(int(data[1])*37, len(data)-2)
		if typ == protocol.FrameKeepalive {
			n = 0
		}
		body = frames.Append(body, typ, off, data[2:2+n])
		off += uint64(n) * 3
		data = data[2+n:]
	}
	return body
}

// seeds are FuzzFrames' f.Add data arguments, in its order.
func seeds() [][]byte {
	return [][]byte{
		{1, 3, 'a', 'b', 'c'},
		{0, 0, 2, 1, 'x', 4, 200},
		frames.Append(frames.Append(nil, protocol.FrameStdout, 7, []byte("hello")), protocol.FrameExit, 12, []byte(`{"offset":12}`)),
		frames.AppendHeader(nil, protocol.FrameStdout, 0, frames.MaxPayload+1),
		frames.AppendHeader(nil, protocol.FrameKeepalive, 0, 1),
		{9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}
}

// corpusFiles reads the []byte argument of each file of a committed
// `go test fuzz v1` corpus directory, sorted by name; none when it is absent.
func corpusFiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	names, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || dir == "" {
		return out, err
	}
	for _, name := range names {
		raw, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if q, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				out[filepath.Base(name)] = []byte(s)
				break
			}
		}
	}
	return out, nil
}

func hostile() map[string][]byte {
	hdr := func(typ uint8, off uint64, n uint32) []byte {
		b := frames.AppendHeader(nil, typ, off, 0)
		b[9], b[10], b[11], b[12] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	exit := frames.Append(nil, protocol.FrameExit, 3, []byte(`{"exit_code":0,"signal":null,"truncated":false,"writers_may_be_alive":false,"offset":3}`))
	return map[string][]byte{
		"empty":                     nil,
		"one byte":                  {1},
		"cut header":                hdr(1, 0, 10)[:5],
		"cut payload":               append(hdr(1, 0, 10), "abc"...),
		"unknown type 5":            hdr(5, 0, 0),
		"unknown type 255":          hdr(255, 1<<63, 0),
		"keepalive with payload":    append(hdr(0, 0, 1), 'x'),
		"keepalive announcing 4GiB": hdr(0, 0, 1<<32-1),
		"oversized by one":          hdr(2, 0, uint32(frames.MaxPayload)+1),
		"oversized 4GiB":            hdr(1, 0, 1<<32-1),
		"max payload whole":         frames.Append(nil, protocol.FrameStdout, 1<<40, bytes.Repeat([]byte{0xff, 0}, frames.MaxPayload/2)),
		"max payload cut by one":    frames.Append(nil, protocol.FrameStderr, 0, make([]byte, frames.MaxPayload))[:protocol.FrameHeaderBytes+frames.MaxPayload-1],
		"offset max uint64":         frames.Append(nil, protocol.FrameStdout, 1<<64-1, []byte{0x80, 0xfe}),
		"keepalive then exit":       append(frames.Append(nil, protocol.FrameKeepalive, 0, nil), exit...),
		"exit then garbage":         append(append([]byte{}, exit...), 7),
		"good then unknown":         append(frames.Append(nil, protocol.FrameStdout, 0, []byte("ok")), hdr(6, 0, 0)...),
		"non-utf8 gap and exit":     append(frames.Append(nil, protocol.FrameGap, 0, []byte{0xc3, 0x28}), frames.Append(nil, protocol.FrameExit, 0, []byte{0xff})...),
	}
}

// sample is a fixed pseudo-random set: well-formed bodies cut or corrupted
// at one point, and plain noise.
func sample(n int) [][]byte {
	rng := rand.New(rand.NewSource(35))
	var out [][]byte
	for range n {
		var body []byte
		for range rng.Intn(5) {
			p := make([]byte, rng.Intn(70))
			rng.Read(p)
			typ := uint8(1 + rng.Intn(4))
			if rng.Intn(5) == 0 {
				typ, p = 0, nil
			}
			body = frames.Append(body, typ, rng.Uint64()>>uint(rng.Intn(64)), p)
		}
		switch rng.Intn(4) {
		case 0:
			if len(body) > 0 {
				body = body[:rng.Intn(len(body))]
			}
		case 1:
			if len(body) > 0 {
				body[rng.Intn(len(body))] = byte(rng.Intn(256))
			}
		case 2:
			body = make([]byte, rng.Intn(40))
			rng.Read(body)
		}
		out = append(out, body)
	}
	return out
}

func main() {
	corpus := flag.String("corpus", "", "a committed go test fuzz v1 corpus directory of FuzzFrames (read when present)")
	flag.Parse()
	var cases []verdict
	add := func(name string, body []byte) {
		fs, end := judge(body, 16)
		fs2, end2 := judge(body, 1<<16)
		a, _ := json.Marshal(fs)
		b, _ := json.Marshal(fs2)
		if end != end2 || !bytes.Equal(a, b) {
			panic("the Go reader's verdict depends on its buffer size: " + name)
		}
		cases = append(cases, verdict{Name: name, Body: hex.EncodeToString(body), Frames: fs, End: end})
	}
	for i, s := range seeds() {
		add(fmt.Sprintf("seed %d raw", i), s)
		add(fmt.Sprintf("seed %d written", i), pieces(s))
	}
	files, err := corpusFiles(*corpus)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add("corpus "+n+" raw", files[n])
		add("corpus "+n+" written", pieces(files[n]))
	}
	hs := hostile()
	hnames := make([]string, 0, len(hs))
	for n := range hs {
		hnames = append(hnames, n)
	}
	sort.Strings(hnames)
	for _, n := range hnames {
		add("hostile "+n, hs[n])
	}
	for i, b := range sample(400) {
		add(fmt.Sprintf("sample %d", i), b)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(map[string]any{"max_payload": frames.MaxPayload, "cases": cases}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
