package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestEngineRefusesBeforeAnySandbox drives `microvm engine` in-process with
// requests that must be refused locally, each answered by its own id with a
// failure envelope carrying the generated code and exit code, then ends it by
// closing stdin. The lifecycle itself is exercised end to end by the Python
// and TypeScript packages' tests (make test-clients).
func TestEngineRefusesBeforeAnySandbox(t *testing.T) {
	in := strings.Join([]string{
		`{"id":1,"op":"run","args":{"command":["true"]}}`,
		`{"id":2,"op":"create","args":{"local":true,"bogus":1}}`,
		`{"id":3,"op":"create","args":{"local":true,"image":"x"}}`,
		`{"id":4,"op":"create","args":{"region":"mars-north-1"}}`,
		`{"id":5,"op":"bogus"}`,
		``,
	}, "\n")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"engine"}, strings.NewReader(in), &out, &errOut)
	if code != 0 {
		t.Fatalf("engine exited %d; stderr: %s", code, errOut.String())
	}
	got := map[int64]map[string]any{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r struct {
			ID       int64          `json:"id"`
			Envelope map[string]any `json:"envelope"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a reply frame is not JSON: %q", sc.Text())
		}
		got[r.ID] = r.Envelope
	}
	// Catches: an engine that answers a request twice, drops one, or mixes ids.
	if len(got) != 5 {
		t.Fatalf("want one envelope for each of 5 requests, got %v", got)
	}
	for id, want := range map[int64]string{1: "send create or attach first", 2: "bogus", 3: "local mode", 4: "mars-north-1", 5: `unknown op "bogus"`} {
		env := got[id]
		// Catches: a refusal reported as success, or an exit code that is
		// not the InvalidArg row of the generated table.
		if env["status"] != "error" || env["code"] != "ERR_INVALID_ARG" || env["exitCode"] != float64(2) {
			t.Errorf("request %d: want an ERR_INVALID_ARG failure with exit 2, got %v", id, env)
		}
		if msg, _ := env["error"].(string); !strings.Contains(msg, want) {
			t.Errorf("request %d: the message %q does not name %q", id, msg, want)
		}
	}
}

// TestEngineLaunchPolicyRefusals drives create's launch policy and the
// handle ops before a sandbox: each refusal names its finding (a launch
// value the service refuses is refused before any emulator starts), and
// cancel of a request that is not in flight is an answer, not a failure.
func TestEngineLaunchPolicyRefusals(t *testing.T) {
	in := strings.Join([]string{
		`{"id":1,"op":"create","args":{"local":true,"maxDurationSec":28801}}`,
		`{"id":2,"op":"create","args":{"local":true,"maxIdleSec":10}}`,
		`{"id":3,"op":"create","args":{"local":true,"launchEnv":["NOEQUALS"]}}`,
		`{"id":4,"op":"start","args":{"command":["true"]}}`,
		`{"id":5,"op":"cancel","args":{"requestId":99}}`,
		``,
	}, "\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"engine"}, strings.NewReader(in), &out, &errOut); code != 0 {
		t.Fatalf("engine exited %d; stderr: %s", code, errOut.String())
	}
	got := map[int64]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r struct {
			ID       int64           `json:"id"`
			Envelope json.RawMessage `json:"envelope"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a reply frame is not JSON: %q", sc.Text())
		}
		got[r.ID] = string(r.Envelope)
	}
	// Catches: launch values passed to the service unchecked (or dropped),
	// a refusal without its finding, and cancel failing on a finished request.
	for id, want := range map[int64][]string{
		1: {`"code":"ERR_INVALID_ARG"`, "maxDurationSec 28801", "max-duration"},
		2: {`"code":"ERR_INVALID_ARG"`, "maxIdleSec 10", "idle-policy"},
		3: {`"code":"ERR_INVALID_ARG"`, "NOEQUALS"},
		4: {`"code":"ERR_INVALID_ARG"`, "send create or attach first"},
		5: {`"status":"ok"`, `"done":false`},
	} {
		for _, w := range want {
			if !strings.Contains(got[id], w) {
				t.Errorf("request %d: %s does not contain %s", id, got[id], w)
			}
		}
	}
}
