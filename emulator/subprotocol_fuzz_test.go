package emulator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// FuzzOfferedSubprotocols: whatever a caller offers in
// Sec-WebSocket-Protocol, none of the platform's own values (the token
// among them) is ever passed on to the guest, and every other value is.
func FuzzOfferedSubprotocols(f *testing.F) {
	for _, seed := range []string{
		"lambda-microvms, lambda-microvms.authentication.tok, lambda-microvms.port.8080",
		"lambda-microvms,lambda-microvms.authentication.a.b.c,lambda-microvms.port.1,my-app",
		"my-app", "", ",,, ,", "lambda-microvms.port.", " lambda-microvms.authentication.x ,chat",
		"LAMBDA-MICROVMS, lambda-microvms.portx",
	} {
		f.Add(seed, "")
	}
	f.Add("lambda-microvms", "lambda-microvms.authentication.second-line, app2")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		h := http.Header{}
		h.Add("Sec-WebSocket-Protocol", line1)
		if line2 != "" {
			h.Add("Sec-WebSocket-Protocol", line2)
		}
		sp := offeredSubprotocols(h)
		var want []string
		for _, v := range strings.Split(line1+","+line2, ",") {
			v = strings.TrimSpace(v)
			if v == "" || v == taxonomy.WebSocketSubprotocol || strings.HasPrefix(v, taxonomy.WebSocketAuthPrefix) || strings.HasPrefix(v, taxonomy.WebSocketPortPrefix) {
				continue
			}
			want = append(want, v)
		}
		if strings.Join(sp.rest, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("passed on %q, want %q", sp.rest, want)
		}
		for _, v := range sp.rest {
			if strings.HasPrefix(v, "lambda-microvms.") && (strings.HasPrefix(v, taxonomy.WebSocketAuthPrefix) || strings.HasPrefix(v, taxonomy.WebSocketPortPrefix)) {
				t.Fatalf("a platform value %q would reach the guest", v)
			}
		}
		if sp.token != "" && !sp.platform {
			t.Fatalf("a token without the platform flag: %+v", sp)
		}
	})
}
