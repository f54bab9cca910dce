package agentd

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// The two edges of the ASCII range in a poll body: a space (0x20, the first
// byte written as itself) stays a space, and 0x80 (the first byte past
// ASCII, never valid alone) becomes one \ufffd. A JSON decoder hides both
// (it reads "\u0020" as a space and turns a raw 0x80 into U+FFFD itself), so
// the body's bytes are compared. Catches, in the encoder, the ASCII test
// made `<= utf8.RuneSelf` (0x80 is then written raw, or indexes past the
// escape table) and the plain-byte test made `> 0x20` (every space is
// escaped, six bytes for one).
func TestPollBodyBytesAtTheEdgesOfASCII(t *testing.T) {
	for _, out := range []string{"a b", "a\x80b", "\x80", " "} {
		rec := httptest.NewRecorder()
		code := int32(0)
		writeOutcome(rec, "e", protocol.PhaseExited, head{chunks: [][]byte{[]byte(out)}, n: len(out)}, head{}, exitStatus{code: &code})
		want := `"stdout":"` + strings.ReplaceAll(out, "\x80", `\ufffd`) + `"`
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("output %q: body %q, want it to hold %s", out, rec.Body.String(), want)
		}
	}
}
