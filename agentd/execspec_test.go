package agentd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: decoding a start body under only the gate's max_body_bytes cap
// (readJSON(w, r, &req, 0, "") in ExecStart), which lets one start hold up to
// 512 MiB in memory to decode an argv; and an over-cap start answered with
// anything but the spec's text/plain 413.
func TestStartBodyOverStartCapIs413(t *testing.T) {
	d := bootedDaemon(t, nil)
	// Declared length over the cap: refused from the headers alone, so the
	// body is never sent (a client still writing a MiB the daemon will not
	// read could see its write reset before it reads the 413).
	c, br := dialRaw(t, d.addr)
	fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", testToken, protocol.DefaultMaxStartBodyBytes+1)
	raw := readResponse(t, br, "POST")
	text, _ := io.ReadAll(raw.Body)
	if raw.StatusCode != http.StatusRequestEntityTooLarge || !strings.HasPrefix(raw.Header.Get("Content-Type"), "text/plain") || raw.Header.Get(protocol.VersionHeader) == "" {
		t.Fatalf("declared-length start over the start cap: %d %q %q", raw.StatusCode, raw.Header.Get("Content-Type"), text)
	}
	if !strings.Contains(string(text), "1048576") {
		t.Errorf("413 text does not name the start limit: %q", text)
	}
	// Chunked: no declared length, caught while reading; through the
	// contract-validating client, so the 413's shape is checked against the
	// spec's BodyTooLarge.
	big := protocol.StartRequest{ExecID: "huge", Command: []string{"true", strings.Repeat("x", protocol.DefaultMaxStartBodyBytes)}}
	body, _ := json.Marshal(big)
	req, _ := http.NewRequest("POST", d.base+"/v1/exec/start", io.MultiReader(bytes.NewReader(body)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(text), "1048576") {
		t.Fatalf("chunked start over the start cap: %d %q", resp.StatusCode, text)
	}
	if code, _ := d.poll("huge"); code != http.StatusNotFound {
		t.Fatalf("an over-cap start registered an exec: %d", code)
	}
	// A large start under the cap is still served.
	d.mustStart(protocol.StartRequest{ExecID: "fits", Command: []string{"true", strings.Repeat("y", 100<<10)}})
	if o := d.waitExited("fits"); *o.ExitCode != 0 {
		t.Fatalf("start under the cap: exit %d", *o.ExitCode)
	}
}

// Catches: a spawn with a missing cwd reported as "start sh: no such file or
// directory" (fmt.Errorf("start %s: %w", sp.argv[0], err) with no cwd check),
// which blames argv[0]; and a detail that quotes an env value.
func TestSpawnFailureNamesTheCwd(t *testing.T) {
	d := bootedDaemon(t, nil)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct{ cwd, want string }{
		{"/nonexistent/dir", "no such file or directory"},
		{file, "not a directory"},
	} {
		r := d.start(protocol.StartRequest{ExecID: "cwd", Command: []string{"sh", "-c", "true"}, Cwd: strp(tc.cwd),
			Env: map[string]string{"SECRET": "env-value-never-quoted"}})
		if r.StatusCode() != 500 || r.JSON500.Error != taxonomy.SlugSpawnFailed {
			t.Fatalf("cwd %s: %d %s", tc.cwd, r.StatusCode(), r.Body)
		}
		detail := r.JSON500.Detail
		if !strings.Contains(detail, "cwd") || !strings.Contains(detail, tc.cwd) || !strings.Contains(detail, tc.want) || strings.Contains(detail, "start sh") {
			t.Errorf("cwd %s: detail %q does not name the cwd", tc.cwd, detail)
		}
		if strings.Contains(detail, "env-value-never-quoted") {
			t.Errorf("detail quotes an env value: %q", detail)
		}
	}
	if code, _ := d.poll("cwd"); code != 404 {
		t.Fatalf("a failed spawn registered an exec: %d", code)
	}
}
