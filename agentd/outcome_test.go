package agentd

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

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

// FuzzOutcomeJSON: whatever the bytes and wherever the chunk boundaries fall
// (a character split across two chunks included), the streamed body is valid
// JSON whose stdout is exactly strings.ToValidUTF8(output, U+FFFD), the
// lossy decode the poll contract promises. Catches: a character split at a
// chunk boundary turned into two replacements, a run of invalid bytes
// turned into several, a control byte or quote left unescaped.
func FuzzOutcomeJSON(f *testing.F) {
	f.Add([]byte("plain\n"), []byte{3})
	f.Add([]byte("\x00\x01\"\\\t\r\n\u2028é€😀"), []byte{0, 1, 2})
	f.Add([]byte("ab\xff\xfe\xe2\x82cd\xf0\x9f\x98"), []byte{1})
	f.Add([]byte(strings.Repeat("é", 40000)), []byte{200, 7})
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
		if got["exec_id"] != "id\"x" || got["phase"] != "exited" || got["exit_code"] != 3.0 || got["signal"] != 9.0 || got["truncated"] != true || got["writers_may_be_alive"] != false {
			t.Fatalf("fields: %v", got)
		}
	})
}
