package agentd

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFSQueryErrorsThroughTheServer drives the fs routes' query errors through
// the whole daemon (gate, generated wrapper, ErrorHandlerFunc). Wrong edit
// caught: the server's parameter-error handler answering fs routes with the
// generated wrapper's own text (or a JSON ErrorBody), so a missing path reads
// differently from the fs handlers' own refusal and a non-integer line bound
// masquerades as something else.
func TestFSQueryErrorsThroughTheServer(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	cases := []struct {
		method, query, want string
	}{
		{http.MethodGet, "/v1/fs/file", fsMissingPath},
		{http.MethodPut, "/v1/fs/file", fsMissingPath},
		{http.MethodGet, "/v1/fs/tar", fsMissingPath},
		{http.MethodPut, "/v1/fs/tar", fsMissingPath},
		{http.MethodGet, "/v1/fs/file?path=/etc/hostname&start_line=abc", "integer"},
		{http.MethodGet, "/v1/fs/file?path=/etc/hostname&end_line=1.5", "integer"},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, d.base+c.query, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.query, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: status %d, want 400 (never 404)", c.method, c.query, resp.StatusCode)
		}
		if !strings.Contains(string(body), c.want) {
			t.Errorf("%s %s: body %q does not say %q", c.method, c.query, body, c.want)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s %s: content type %q, want text/plain", c.method, c.query, ct)
		}
	}
}

// TestServerHandsFSItsLimitSet configures the tar caps on the daemon (as
// AGENTD_MAX_TAR_MEMBERS would) and sees the fs route enforce them. Wrong
// edit caught: FS given its own copy of the limits, or a field of it left
// at zero, so a configured cap or disk reserve never reaches the tar routes.
func TestServerHandsFSItsLimitSet(t *testing.T) {
	d := startDaemon(t, func(c *Config) {
		c.MaxTarMembers = 2
		c.DiskReserveBytes = 12345
	})
	d.bootstrap(nil)
	if d.srv.fs.limits != d.srv.cfg.LimitSet {
		t.Fatalf("FS limits %+v, the server's %+v", d.srv.fs.limits, d.srv.cfg.LimitSet)
	}
	if d.srv.fs.guard.reserve != 12345 {
		t.Fatalf("disk guard reserve %d, configured 12345", d.srv.fs.guard.reserve)
	}
	dir := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodGet, d.base+"/v1/fs/tar?path="+url.QueryEscape(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "max_tar_members") {
		t.Fatalf("a 4-member tree under max_tar_members=2: %d %q", resp.StatusCode, body)
	}
}
