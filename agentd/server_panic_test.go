package agentd

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A handler that panics after sending 200 keeps its 200: the status is on
// the wire, so the recovery only ends the body and writes nothing into it.
// Catches: trackingWriter counting a status as sent only above 200
// (`code >= 200` made `> 200`): the recovery then believes nothing was sent
// and appends its 500 text to the 200's body.
func TestPanicAfterA200WritesNoErrorIntoTheBody(t *testing.T) {
	srv, err := NewServer(testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	real := srv.inner
	srv.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom-after-200" {
			w.WriteHeader(http.StatusOK)
			panic("deliberate test panic after the status")
		}
		real.ServeHTTP(w, r)
	})
	d := serveDaemon(t, srv)
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "GET /boom-after-200 HTTP/1.1\r\nHost: x\r\n\r\n")
	resp := readResponse(t, br, "GET")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "internal error") {
		t.Fatalf("a panic after a 200: status %d, body %q", resp.StatusCode, body)
	}
}
