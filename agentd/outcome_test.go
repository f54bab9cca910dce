package agentd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/microvms/microvms/gen/protocol"
)

// chunked splits data into chunks of the given sizes (cycled), as the head
// holds it.
func chunked(data []byte, sizes []byte) [][]byte {
	var out [][]byte
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(sizes) > 0 {
			n = min(int(sizes[i%len(sizes)])+1, len(data))
		}
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// oracleJSONString is the poll body's string encoding, one character at a
// time: the escapes and the one-replacement-per-invalid-run rule, with
// nothing batched. writeOutcome batches runs of plain and of escaped bytes;
// the fuzz target holds its bytes to this.
func oracleJSONString(p []byte) string {
	var b strings.Builder
	b.WriteByte('"')
	invalid := false
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c == '\t':
				b.WriteString(`\t`)
			case c < 0x20:
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteByte(c)
			}
			invalid = false
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			if !invalid {
				b.WriteString(`\ufffd`)
				invalid = true
			}
			i++
			continue
		}
		invalid = false
		if r == '\u2028' || r == '\u2029' {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.Write(p[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// FuzzOutcomeJSON: whatever the bytes and wherever the chunk boundaries fall
// (a character split across two chunks included), the streamed body is valid
// JSON whose stdout is exactly strings.ToValidUTF8(output, U+FFFD), the
// lossy decode the poll contract promises. Catches: a character split at a
// chunk boundary turned into two replacements, a run of invalid bytes
// turned into several, a control byte or quote left unescaped, and any byte
// of the body differing from the per-character oracle (a batched run cut
// short at the scratch buffer's end, a replacement collapsed across valid
// text between two invalid runs).
func FuzzOutcomeJSON(f *testing.F) {
	f.Add([]byte("plain\n"), []byte{3})
	f.Add([]byte("\x00\x01\"\\\t\r\n\u2028é€😀"), []byte{0, 1, 2})
	f.Add([]byte("ab\xff\xfe\xe2\x82cd\xf0\x9f\x98"), []byte{1})
	f.Add([]byte(strings.Repeat("é", 40000)), []byte{200, 7})
	f.Add(append(make([]byte, 70000), "a\xffb\xff\xfe"...), []byte{255})
	f.Add([]byte("\xff\xc3\xa9\xff\x00\xff"), []byte{0})
	f.Fuzz(func(t *testing.T, data []byte, sizes []byte) {
		code, sig := int32(3), int32(9)
		rec := httptest.NewRecorder()
		writeOutcome(rec, "id\"x", protocol.PhaseExited,
			head{chunks: chunked(data, sizes), n: len(data)},
			head{chunks: chunked(data, nil), n: len(data)},
			exitStatus{code: &code, signal: &sig, truncated: true})
		var got map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("not JSON: %v\n%q", err, rec.Body.String())
		}
		want := strings.ToValidUTF8(string(data), "\uFFFD")
		if got["stdout"] != want || got["stderr"] != want {
			t.Fatalf("stdout %q stderr %q, want %q", got["stdout"], got["stderr"], want)
		}
		wantBody := `{"exec_id":` + oracleJSONString([]byte("id\"x")) + `,"phase":"exited","exit_code":3,"signal":9,"stdout":` +
			oracleJSONString(data) + `,"stderr":` + oracleJSONString(data) + `,"truncated":true,"writers_may_be_alive":false}` + "\n"
		if rec.Body.String() != wantBody {
			t.Fatalf("body bytes differ from the per-character oracle:\n got %q\nwant %q", rec.Body.String(), wantBody)
		}
		if got["exec_id"] != "id\"x" || got["phase"] != "exited" || got["exit_code"] != 3.0 || got["signal"] != 9.0 || got["truncated"] != true || got["writers_may_be_alive"] != false {
			t.Fatalf("fields: %v", got)
		}
	})
}

// BenchmarkOutcome times an ack body holding an 8 MiB head of NUL bytes (the
// worst case: 48 MiB of \u0000) and of plain text, beside encoding/json
// marshalling the same text as the in-run baseline.
func BenchmarkOutcome(b *testing.B) {
	const size = 8 << 20
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog\n", size/44))
	for _, c := range []struct {
		name string
		data []byte
	}{{"nul", make([]byte, size)}, {"text", text}} {
		b.Run(c.name, func(b *testing.B) {
			code := int32(0)
			h := head{chunks: chunked(c.data, nil), n: len(c.data)}
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				writeOutcome(discardResponse{}, "x", protocol.PhaseAcked, h, head{}, exitStatus{code: &code})
			}
		})
	}
	b.Run("baseline-json-text", func(b *testing.B) {
		s := string(text)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// discardResponse is an http.ResponseWriter that keeps nothing.
type discardResponse struct{}

func (discardResponse) Header() http.Header         { return http.Header{} }
func (discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (discardResponse) WriteHeader(int)             {}
