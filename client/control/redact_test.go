package control

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestRunHookPayloadNeverPrintsTheToken: the payload carries the agent token,
// so every way Go prints a value must redact it. Catches a payload type with
// String but no GoString/LogValue, where %#v or a structured log line prints
// the token verbatim.
func TestRunHookPayloadNeverPrintsTheToken(t *testing.T) {
	const token = "tok-secret-0123456789"
	p, err := NewRunHookPayload(token, map[string]string{"K": "V"})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("launch", "payload", p)
	outs := map[string]string{"slog": logged.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		outs[verb] = fmt.Sprintf(verb, p)
	}
	for name, out := range outs {
		if strings.Contains(out, token) {
			t.Errorf("%s prints the token: %s", name, out)
		}
	}
}
