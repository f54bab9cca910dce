package agentd

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A refused body of exactly max_drain_bytes is read and discarded, so the
// connection stays open for the next request; one byte more closes it.
// Catches, in drain: the declared-length check made non-strict
// (`r.ContentLength >= s.cfg.MaxDrainBytes`), the read capped one byte short
// (`MaxDrainBytes+1` made `-1`), and the consumed-all check made strict
// (`n <= s.cfg.MaxDrainBytes` made `<`): each closes a connection that
// could have been kept.
func TestRefusedBodyOfExactlyMaxDrainBytesKeepsTheConnection(t *testing.T) {
	const limit = 1024
	d := startDaemon(t, func(c *Config) { c.MaxDrainBytes = limit })
	d.bootstrap(nil)
	for _, tc := range []struct {
		size  int
		close bool
	}{{limit, false}, {limit + 1, true}} {
		c, br := dialRaw(t, d.addr)
		fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.size, strings.Repeat(" ", tc.size))
		resp := readResponse(t, br, "POST")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a %d-byte body with a wrong token: %d", tc.size, resp.StatusCode)
		}
		if resp.Close != tc.close {
			t.Fatalf("a refused %d-byte body (max_drain_bytes %d): connection closed %v, want %v", tc.size, limit, resp.Close, tc.close)
		}
		if !tc.close {
			fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK {
				t.Fatalf("the kept connection answered %d", resp.StatusCode)
			}
		}
	}
}
