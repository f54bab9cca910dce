package agentd

// Round two of the hostile-caller suite (issue 30): each test here is one row
// of that table, was seen failing on the code before its fix, and runs
// under `make faults`.

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A timeout_sec below limits.min_timeout_secs is a 400 naming the minimum and
// spawns nothing; the minimum itself is accepted and enforced. Before: 1e-10
// and 1e-300 passed as "finite positive", became a zero Duration, and the
// child ran with no timeout at all. Catches: dropping the minimum check (the
// child runs unbounded), comparing with <= (the minimum itself refused), or a
// minimum the contract does not publish.
func TestRoundTwoTimeoutBelowResolution(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.KillGrace = time.Second })
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tiny := range []float64{1e-10, 1e-300, protocol.DefaultMinTimeoutSecs * 0.999} {
		req := shell("tiny", "touch "+marker)
		req.TimeoutSec = &tiny
		// Off contract on purpose: the contract's minimum is the figure refused.
		resp, err := d.client.ExecStartWithResponse(offContract(context.Background()), req, auth(testToken))
		if err != nil || resp.StatusCode() != http.StatusBadRequest || errorBody(t, resp.Body).Error != taxonomy.SlugMalformedRequest ||
			!strings.Contains(string(resp.Body), "0.001") || !strings.Contains(string(resp.Body), "min_timeout_secs") {
			t.Fatalf("timeout_sec %g: %v %d %s", tiny, err, resp.StatusCode(), resp.Body)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a start with a timeout below the minimum spawned its child")
	}
	// The minimum edge: accepted, and the child is stopped by it.
	req := shell("edge", "sleep 30")
	edge := protocol.DefaultMinTimeoutSecs
	req.TimeoutSec = &edge
	d.mustStart(req)
	if o := d.waitExited("edge"); o.Signal == nil || *o.Signal != int32(syscall.SIGTERM) {
		t.Fatalf("exec at the minimum timeout: %v", o.raw)
	}
	sch, _ := d.client.SchemaWithResponse(context.Background())
	if !strings.Contains(string(sch.Body), `"min_timeout_secs"`) {
		t.Fatal("/v1/schema does not publish min_timeout_secs")
	}
}

// Every fs route refuses a relative path with 400 before touching the
// filesystem. Before: ../../etc was a 404 and a deeper ../…/etc or ./ a 200,
// resolved against the daemon's working directory. Catches: a route that
// checks only for a NUL or length (badPath alone), or one route left out.
func TestRoundTwoRelativePathsAre400(t *testing.T) {
	d := bootedDaemon(t, nil)
	// The routes that change things get a relative path that resolves into a
	// temp dir, so a regression writes only there; the read-only ones also get
	// the shapes, a deep ../…/etc and ./.
	cwd, _ := os.Getwd()
	scratch := t.TempDir()
	if err := os.WriteFile(filepath.Join(scratch, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	intoScratch, err := filepath.Rel(cwd, filepath.Join(scratch, "f"))
	if err != nil || filepath.IsAbs(intoScratch) {
		t.Fatalf("no relative path from %s to %s: %v", cwd, scratch, err)
	}
	type route struct{ method, path string }
	var routes []route
	for _, rel := range []string{strings.Repeat("../", 40) + "etc", "./", ".", intoScratch} {
		q := url.Values{"path": {rel}}.Encode()
		routes = append(routes, route{"GET", "/v1/fs/file?" + q}, route{"GET", "/v1/fs/tar?" + q},
			route{"GET", "/v1/fs/stat?" + q}, route{"GET", "/v1/fs/list?" + q}, route{"GET", "/v1/fs/watch?" + q})
	}
	q := url.Values{"path": {intoScratch}}.Encode()
	routes = append(routes, route{"PUT", "/v1/fs/file?" + q}, route{"PUT", "/v1/fs/tar?" + q},
		route{"POST", "/v1/fs/mkdir?" + url.Values{"path": {intoScratch + "-dir"}}.Encode()},
		route{"POST", "/v1/fs/remove?" + q},
		route{"POST", "/v1/fs/move?" + url.Values{"from": {intoScratch}, "to": {filepath.Join(scratch, "g")}}.Encode()},
		route{"POST", "/v1/fs/move?" + url.Values{"from": {filepath.Join(scratch, "f")}, "to": {intoScratch + "-moved"}}.Encode()})
	for _, route := range routes {
		var body io.Reader
		if route.method == "PUT" {
			body = strings.NewReader("x")
		}
		// A watch the old code accepted streams forever; the deadline ends it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, route.method, d.base+route.path, body)
		req.Header.Set("Authorization", "Bearer "+testToken)
		if strings.HasPrefix(route.path, "/v1/fs/tar") {
			req.Header.Set("Content-Type", "application/x-tar")
		} else if route.method == "PUT" {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		resp, err := d.http.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s %s: %v", route.method, route.path, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "absolute") {
			t.Errorf("%s %s: %d %.120q, want 400 naming an absolute path", route.method, route.path, resp.StatusCode, got)
		}
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "f")); err != nil || string(b) != "x" {
		t.Errorf("a refused relative path still reached the file it resolves to: %q %v", b, err)
	}
}
