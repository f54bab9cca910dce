package agentd

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// Catches: comparing only the first len(presented) bytes of the installed
// token (or any compare that accepts a prefix), and an empty presented token
// passing (a zero-length constant-time compare is equal). Each header is sent
// as raw bytes to a real daemon over 127.0.0.1 after bootstrap, at an
// unknown exec: the token must be refused with 401 before routing, where the
// real token gets the handler's 404.
func TestAuthRefusesATokenPrefixAndAnEmptyToken(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	get := func(header string) int {
		t.Helper()
		c, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /v1/exec/nope HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", header)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", header, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("Authorization: Bearer " + testToken + "\r\n"); got != http.StatusNotFound {
		t.Fatalf("the installed token got %d, want 404 for an unknown exec", got)
	}
	refused := []string{
		"Authorization: Bearer " + testToken[:1] + "\r\n",
		"Authorization: Bearer " + testToken[:len(testToken)-1] + "\r\n",
		"Authorization: Bearer \r\n",
		"Authorization: Bearer\r\n",
		"Authorization: \r\n",
	}
	for _, h := range refused {
		if got := get(h); got != http.StatusUnauthorized {
			t.Errorf("%q got %d, want 401", h, got)
		}
	}
	// The server trims a header's trailing space, so on the wire "Bearer "
	// arrives as "Bearer" (no scheme separator). The empty token after the
	// separator is checked on the daemon's own authorizer too.
	for _, h := range []string{"Bearer ", "bearer ", "Bearer " + testToken[:5]} {
		if got := d.srv.boot.authorize(h); got != http.StatusUnauthorized {
			t.Errorf("authorize(%q) = %d, want 401", h, got)
		}
	}
}
