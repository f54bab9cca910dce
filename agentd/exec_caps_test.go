package agentd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A start body whose declared length is exactly max_start_body_bytes is
// served, and one byte more is refused with the start route's own text.
// Catches, in ExecStart: the declared-length check made non-strict
// (`r.ContentLength >= limit`: a body of exactly the cap is refused), and
// the choice of refusal text negated (`limit != s.cfg.MaxBodyBytes`: an
// over-cap start is blamed on max_body_bytes, a setting it is far below).
func TestStartBodyOfExactlyTheStartCapIsServed(t *testing.T) {
	const limit = 4096
	d := bootedDaemon(t, func(c *Config) { c.MaxStartBodyBytes = limit })
	body, _ := json.Marshal(protocol.StartRequest{ExecID: "at-cap", Command: []string{"true"}})
	padded := string(body) + strings.Repeat(" ", limit-len(body))
	for _, tc := range []struct {
		body string
		want int
	}{{padded, http.StatusOK}, {padded + " ", http.StatusRequestEntityTooLarge}} {
		c, br := dialRaw(t, d.addr)
		fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testToken, len(tc.body), tc.body)
		resp := readResponse(t, br, "POST")
		text, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.want {
			t.Fatalf("a start body of %d bytes (cap %d): %d %q, want %d", len(tc.body), limit, resp.StatusCode, text, tc.want)
		}
		if tc.want == http.StatusRequestEntityTooLarge && !strings.HasPrefix(string(text), "exec start body is larger than 4096 bytes") {
			t.Fatalf("the over-cap start's 413 says %q, want the start route's text naming 4096", text)
		}
	}
	if o := d.waitExited("at-cap"); o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("the start at the cap did not run: %+v", o)
	}
	// Chunked, the cap is found while reading, and the text is still the
	// start route's. Catches, in readJSON's choice of text, either half of
	// `tooLargeText == "" || tooLarge.Limit != limit` negated: the start's
	// own text is then replaced by max_body_bytes'.
	c, br := dialRaw(t, d.addr)
	over := padded + " "
	fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", testToken, len(over), over)
	resp := readResponse(t, br, "POST")
	text, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.HasPrefix(string(text), "exec start body is larger than 4096 bytes") {
		t.Fatalf("a chunked start body over the cap: %d %q, want 413 with the start route's text naming 4096", resp.StatusCode, text)
	}
}

// An exec_id of exactly limits.max_exec_id_bytes is an id like any other: a
// poll for one nobody started names it. Set to 0 (as
// AGENTD_MAX_EXEC_ID_BYTES=0 does: LoadConfig takes any non-negative
// number) the cap is off, so a long id starts and is echoed. Catches: the
// unknown-exec check made non-strict (`int64(len(id)) >= max`: an id at the
// cap is reported as longer than it and not named), and either check's
// `max > 0` made `max >= 0` (with the cap off, every start is refused as
// too long, and every unknown id is called over-long).
func TestExecIDAtTheCapOrUncappedIsAnOrdinaryID(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.MaxExecIDBytes = 16 })
	atCap := strings.Repeat("a", 16)
	poll, err := d.client.ExecPollWithResponse(context.Background(), atCap, auth(testToken))
	if err != nil || poll.StatusCode() != http.StatusNotFound || !strings.Contains(errorBody(t, poll.Body).Detail, `"`+atCap+`"`) {
		t.Fatalf("poll of an unknown id of exactly the cap: %v %d %s", err, poll.StatusCode(), poll.Body)
	}

	d = bootedDaemon(t, func(c *Config) { c.MaxExecIDBytes = 0 })
	long := strings.Repeat("u", 2000)
	if resp := d.start(protocol.StartRequest{ExecID: long, Command: []string{"true"}}); resp.StatusCode() != http.StatusOK {
		t.Fatalf("start of a 2000-byte id with the cap off: %d %s", resp.StatusCode(), resp.Body)
	}
	if o := d.waitExited(long); o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("the uncapped id's exec: %+v", o)
	}
	other := strings.Repeat("v", 2000)
	poll, err = d.client.ExecPollWithResponse(context.Background(), other, auth(testToken))
	if err != nil || poll.StatusCode() != http.StatusNotFound {
		t.Fatalf("poll of an unknown uncapped id: %v %d %.200s", err, poll.StatusCode(), poll.Body)
	}
	if e := errorBody(t, poll.Body); e.Error != taxonomy.SlugUnknownExec || !strings.Contains(e.Detail, `"`+other+`"`) {
		t.Fatalf("with the cap off, an unknown id is not named: %.200s", poll.Body)
	}
}

// An ack hands the reclaimer the bytes it released: stdout's and stderr's
// together. Catches: `stdout.n + stderr.n` made `-` in ExecAck (the
// reclaimer then counts 10-3 bytes for 13, and a run of acks of large
// stderr counts negative and never collects).
func TestAckCountsBothStreamsForReclaim(t *testing.T) {
	d := bootedDaemon(t, nil)
	d.mustStart(shell("both", "printf 0123456789; printf abc >&2"))
	if o := d.waitExited("both"); o.ExitCode == nil || *o.ExitCode != 0 {
		t.Fatalf("exec: %+v", o)
	}
	before := d.srv.execs.reclaim.pending.Load()
	resp, err := d.client.ExecAckWithResponse(context.Background(), "both", auth(testToken))
	if err != nil || resp.StatusCode() != http.StatusOK {
		t.Fatalf("ack: %v %d", err, resp.StatusCode())
	}
	if got := d.srv.execs.reclaim.pending.Load() - before; got != 13 {
		t.Fatalf("the ack handed the reclaimer %d bytes, want 13 (10 of stdout and 3 of stderr)", got)
	}
}

// A NUL is refused wherever it sits, the first byte included. Catches, in
// buildSpec, `strings.IndexByte(…, 0) >= 0` made `> 0` for an env value or
// for an argument: a NUL in the first byte would then reach the spawn, which
// fails it as a 500 spawn_failed (the daemon's fault) instead of the
// caller's 400.
func TestNULInTheFirstByteIsMalformed(t *testing.T) {
	d := bootedDaemon(t, nil)
	for name, req := range map[string]protocol.StartRequest{
		"argument": {ExecID: "nul-arg", Command: []string{"echo", "\x00b"}},
		"program":  {ExecID: "nul-prog", Command: []string{"\x00true"}},
		"env":      {ExecID: "nul-env", Command: []string{"true"}, Env: map[string]string{"A": "\x00a"}},
	} {
		resp := d.start(req)
		if resp.StatusCode() != http.StatusBadRequest || resp.JSON400 == nil || resp.JSON400.Error != taxonomy.SlugMalformedRequest || !strings.Contains(resp.JSON400.Detail, "NUL") {
			t.Errorf("NUL first in the %s: %d %s", name, resp.StatusCode(), resp.Body)
		}
		if code, _ := d.poll(req.ExecID); code != http.StatusNotFound {
			t.Errorf("NUL first in the %s: the refused start registered an exec (%d)", name, code)
		}
	}
}

// user alone or group alone each demotes: the one given is applied, and
// user alone takes the user's primary group while group alone keeps the
// daemon's uid. Catches, in buildSpec's `req.User != nil ||
// req.Group != nil`, either half negated: `req.User == nil || …` runs a
// user-only start as root, `… || req.Group == nil` a group-only start in
// the daemon's group (TestDemotion gives both, which neither mutant breaks).
func TestUserOrGroupAloneDemotes(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("demoting to another user needs root")
	}
	d := bootedDaemon(t, nil)
	nobody := uint32(65534)
	for _, tc := range []struct {
		id          string
		user, group *uint32
		want        string
	}{
		{"user-only", &nobody, nil, "65534 65534"}, // nobody's primary group (TestRoundTwoUserWithoutGroup)
		{"group-only", nil, &nobody, fmt.Sprintf("%d 65534", os.Getuid())},
	} {
		d.mustStart(protocol.StartRequest{ExecID: tc.id, Command: []string{"sh", "-c", `echo "$(id -u) $(id -g)"`}, User: tc.user, Group: tc.group})
		if o := d.waitExited(tc.id); o.Stdout == nil || strings.TrimSpace(*o.Stdout) != tc.want {
			t.Errorf("%s: uid and gid %s, want %q", tc.id, o.raw["stdout"], tc.want)
		}
	}
}

// The gate's max_body_bytes has the same edge: a body of exactly the cap is
// served, one byte more is refused with max_body_bytes' own text (here the
// start cap is the larger one, so the gate's is what applies). Catches: the
// gate's declared-length check made non-strict (`r.ContentLength >=
// s.cfg.MaxBodyBytes`).
func TestBodyOfExactlyMaxBodyBytesIsServed(t *testing.T) {
	const limit = 4096
	d := bootedDaemon(t, func(c *Config) { c.MaxBodyBytes = limit; c.MaxStartBodyBytes = 2 * limit })
	body, _ := json.Marshal(protocol.StartRequest{ExecID: "at-gate", Command: []string{"true"}})
	padded := string(body) + strings.Repeat(" ", limit-len(body))
	for _, tc := range []struct {
		body string
		want int
	}{{padded, http.StatusOK}, {padded + " ", http.StatusRequestEntityTooLarge}} {
		c, br := dialRaw(t, d.addr)
		fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testToken, len(tc.body), tc.body)
		resp := readResponse(t, br, "POST")
		text, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.want {
			t.Fatalf("a body of %d bytes (max_body_bytes %d): %d %q, want %d", len(tc.body), limit, resp.StatusCode, text, tc.want)
		}
		if tc.want == http.StatusRequestEntityTooLarge && !strings.Contains(string(text), "max_body_bytes (4096 bytes)") {
			t.Fatalf("the over-cap body's 413 says %q, want max_body_bytes' text", text)
		}
	}
	d.waitExited("at-gate")
}

// max_start_body_bytes set to 0 admits no start body at all, declared or
// chunked. Catches: readJSON applying its cap only when it is positive (a
// declared-length start was refused while the same body sent chunked was
// read and served).
func TestStartCapOfZeroRefusesChunkedBodiesToo(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.MaxStartBodyBytes = 0 })
	body, _ := json.Marshal(protocol.StartRequest{ExecID: "zero-cap", Command: []string{"true"}})
	for _, chunked := range []bool{false, true} {
		c, br := dialRaw(t, d.addr)
		if chunked {
			fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", testToken, len(body), body)
		} else {
			fmt.Fprintf(c, "POST /v1/exec/start HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", testToken, len(body), body)
		}
		resp := readResponse(t, br, "POST")
		text, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked=%v: a start under a zero cap answered %d %q, want 413", chunked, resp.StatusCode, text)
		}
	}
}
