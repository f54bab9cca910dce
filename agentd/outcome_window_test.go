package agentd

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// A run of invalid bytes that straddles the encoder's window (its 64 KiB
// plus UTFMax) is still one replacement character, wherever in the run the
// window ends. Catches: encode's closing `start < i` made `<=`, which writes
// an empty run after a window that ends in a replacement and so forgets the
// replacement was just written; the next window then opens the same run
// with a second U+FFFD (a mutant no other test or fuzz seed reached).
func TestInvalidRunAcrossTheWindowIsOneReplacement(t *testing.T) {
	window := len(jsonText{}.window)
	for _, before := range []int{window - 1, window - 3, window - 10} {
		data := append(bytes.Repeat([]byte("a"), before), bytes.Repeat([]byte{0xff}, 20)...)
		data = append(data, "end"...)
		rec := httptest.NewRecorder()
		code := int32(0)
		writeOutcome(rec, "w", protocol.PhaseExited, head{chunks: [][]byte{data}, n: len(data)}, head{}, exitStatus{code: &code})
		var got struct {
			Stdout string `json:"stdout"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if want := strings.ToValidUTF8(string(data), "\uFFFD"); got.Stdout != want {
			t.Fatalf("%d bytes before the run: %d replacement characters, want 1", before, strings.Count(got.Stdout, "\uFFFD"))
		}
	}
}
