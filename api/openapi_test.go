package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/microvms/microvms/api"
)

const (
	hookPrefix    = "/aws/lambda-microvms/runtime/v1"
	versionHeader = "microvms-agentd-version"
)

// route is one operation of protocol v1 as the reference daemon serves it: its
// statuses (from the reference's docs/schema.json) and the error slugs each
// status can carry. Written out by hand so that a status, slug or route dropped
// from api/openapi.yaml fails here rather than silently leaving the contract.
type route struct {
	method, path, operationID string
	bearer                    bool
	statuses                  []int
	slugs                     map[int][]string
}

var routes = []route{
	{"POST", hookPrefix + "/ready", "hookReady", false, []int{200}, nil},
	{"POST", hookPrefix + "/validate", "hookValidate", false, []int{200}, nil},
	{"POST", hookPrefix + "/run", "hookRun", false, []int{200, 400, 409, 503}, nil}, // 503: ours (issue 12), limits.max_open_bodies
	{"POST", hookPrefix + "/suspend", "hookSuspend", false, []int{200}, nil},
	{"POST", hookPrefix + "/resume", "hookResume", false, []int{200}, nil},
	{"POST", hookPrefix + "/terminate", "hookTerminate", false, []int{200}, nil},
	// 429 at_capacity is ours (issue 30): only a tty start, itself additive, meets it.
	{"POST", "/v1/exec/start", "execStart", true, []int{200, 400, 401, 409, 413, 429, 500, 503},
		map[int][]string{400: {"malformed_request"}, 409: {"limits_unavailable"}, 429: {"at_capacity"}, 500: {"spawn_failed"}}},
	{"GET", "/v1/exec/{id}", "execPoll", true, []int{200, 401, 404, 503},
		map[int][]string{404: {"unknown_exec"}}},
	{"GET", "/v1/exec/{id}/stream", "execStream", true, []int{200, 400, 401, 404, 503},
		map[int][]string{400: {"malformed_request"}, 404: {"unknown_exec"}}},
	{"POST", "/v1/exec/{id}/stdin", "execStdin", true, []int{200, 400, 401, 404, 408, 409, 410, 413, 500, 503},
		map[int][]string{
			400: {"malformed_request"}, 404: {"unknown_exec"}, 408: {"stdin_write_timeout"},
			409: {"stdin_not_requested"}, 410: {"stdin_closed"}, 413: {"stdin_write_too_large"},
			500: {"stdin_write_failed"},
		}},
	{"POST", "/v1/exec/{id}/ack", "execAck", true, []int{200, 401, 404, 409, 503},
		map[int][]string{404: {"unknown_exec"}, 409: {"still_running", "already_acked"}}},
	{"POST", "/v1/exec/{id}/kill", "execKill", true, []int{200, 401, 404, 503},
		map[int][]string{404: {"unknown_exec"}}},
	{"GET", "/v1/fs/file", "fsReadFile", true, []int{200, 400, 401, 404, 500, 503}, nil},
	{"PUT", "/v1/fs/file", "fsWriteFile", true, []int{204, 400, 401, 413, 500, 503, 507}, nil},
	{"GET", "/v1/fs/tar", "fsReadTar", true, []int{200, 400, 401, 404, 413, 500, 503}, nil},
	{"PUT", "/v1/fs/tar", "fsWriteTar", true, []int{204, 400, 401, 413, 500, 503, 507}, nil},
	// Ours (a checkpoint's save and restore): nanosecond times out, the archive's own modes, owners, times and links in.
	{"GET", "/v1/fs/tar/exact", "fsReadTarExact", true, []int{200, 400, 401, 404, 413, 500, 503}, nil},
	{"PUT", "/v1/fs/tar/exact", "fsWriteTarExact", true, []int{204, 400, 401, 413, 500, 503, 507}, nil},
	// Ours, not the reference's (issue 21): additive filesystem operations.
	{"GET", "/v1/fs/stat", "fsStat", true, []int{200, 400, 401, 404, 500, 503},
		map[int][]string{400: {"malformed_request", "not_a_directory"}, 404: {"path_not_found"}, 500: {"fs_failed"}}},
	{"GET", "/v1/fs/list", "fsList", true, []int{200, 400, 401, 404, 500, 503},
		map[int][]string{400: {"malformed_request", "not_a_directory"}, 404: {"path_not_found"}, 500: {"fs_failed"}}},
	{"POST", "/v1/fs/mkdir", "fsMkdir", true, []int{200, 400, 401, 409, 500, 503},
		map[int][]string{400: {"malformed_request", "not_a_directory"}, 409: {"path_exists"}, 500: {"fs_failed"}}},
	{"POST", "/v1/fs/move", "fsMove", true, []int{200, 400, 401, 404, 409, 500, 503},
		map[int][]string{400: {"malformed_request", "not_a_directory"}, 404: {"path_not_found"}, 409: {"path_exists", "directory_not_empty"}, 500: {"fs_failed"}}},
	{"GET", "/v1/fs/watch", "fsWatch", true, []int{200, 400, 401, 404, 429, 500, 503},
		map[int][]string{400: {"malformed_request", "not_a_directory"}, 404: {"path_not_found"}, 429: {"at_capacity"}, 500: {"fs_failed"}}},
	{"POST", "/v1/fs/remove", "fsRemove", true, []int{200, 400, 401, 404, 409, 500, 503},
		map[int][]string{400: {"malformed_request", "not_a_directory"}, 404: {"path_not_found"}, 409: {"directory_not_empty"}, 500: {"fs_failed"}}},
	{"POST", "/v1/exec/{id}/resize", "execResize", true, []int{200, 400, 401, 404, 409, 410, 503},
		map[int][]string{400: {"malformed_request"}, 404: {"unknown_exec"}, 409: {"not_a_tty"}, 410: {"stdin_closed"}}},
	{"POST", "/v1/exec/{id}/signal", "execSignal", true, []int{200, 400, 401, 404, 503},
		map[int][]string{400: {"malformed_request", "unknown_signal"}, 404: {"unknown_exec"}}},
	{"GET", "/v1/execs", "execList", true, []int{200, 401, 503}, nil},
	// Ours (issue 35): start's refusals, and 404 only for an exec collected
	// between its start and the answer.
	{"POST", "/v1/exec/run", "execRun", true, []int{200, 400, 401, 404, 409, 413, 429, 500, 503},
		map[int][]string{400: {"malformed_request"}, 404: {"unknown_exec"}, 409: {"limits_unavailable"}, 429: {"at_capacity"}, 500: {"spawn_failed"}}},
	{"GET", "/v1/metrics", "metrics", true, []int{200, 401, 500, 503},
		map[int][]string{500: {"metrics_unavailable"}}},
	{"GET", "/v1/health", "health", false, []int{200}, nil},
	{"GET", "/v1/schema", "schema", false, []int{200}, nil},
	// Ours (issue 52): the schema's few members a client needs first.
	{"GET", "/v1/capabilities", "capabilities", false, []int{200}, nil},
}

func load(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml does not validate: %v", err)
	}
	return doc
}

// ext decodes an extension value into out through JSON, whatever Go shape the
// loader chose for it.
func ext(t *testing.T, exts map[string]any, key string, out any) {
	t.Helper()
	v, ok := exts[key]
	if !ok {
		t.Fatalf("extension %s is missing", key)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

func TestDocumentLoadsAndValidates(t *testing.T) {
	doc := load(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	// The embedded copy is the file, and it loads on its own.
	if _, err := openapi3.NewLoader().LoadFromData(api.OpenAPI); err != nil {
		t.Fatalf("embedded OpenAPI does not load: %v", err)
	}
}

func TestEveryRouteExistsAndNoOtherDoes(t *testing.T) {
	doc := load(t)
	want := map[string]bool{}
	for _, r := range routes {
		want[r.method+" "+r.path] = true
		op := doc.Paths.Find(r.path)
		if op == nil || op.GetOperation(r.method) == nil {
			t.Errorf("%s %s is missing from openapi.yaml (or drop it from this file's routes table)", r.method, r.path)
			continue
		}
		if got := op.GetOperation(r.method).OperationID; got != r.operationID {
			t.Errorf("%s %s: operationId %q in openapi.yaml, %q in this file's routes table (the two must agree)", r.method, r.path, got, r.operationID)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !want[method+" "+path] {
				t.Errorf("%s %s is in openapi.yaml but not in the routes table: add its row at the top of api/openapi_test.go and count it in schema/staleness_test.go's TestRoutesMatchSchemaDocument (docs/ARCHITECTURE.md, \"Walkthrough: add an agentd route\")", method, path)
			}
		}
	}
}

func TestStatusesAndSlugsMatchTheReference(t *testing.T) {
	doc := load(t)
	for _, r := range routes {
		op := doc.Paths.Find(r.path).GetOperation(r.method)
		var got []int
		for code, resp := range op.Responses.Map() {
			n, err := strconv.Atoi(code)
			if err != nil {
				t.Errorf("%s %s: response %q is not a status code", r.method, r.path, code)
				continue
			}
			got = append(got, n)
			v := resp.Value
			if v.Description == nil || strings.TrimSpace(*v.Description) == "" {
				t.Errorf("%s %s %d: no description", r.method, r.path, n)
			}
			if h := v.Headers[versionHeader]; h == nil || h.Ref != "#/components/headers/AgentdVersion" {
				t.Errorf("%s %s %d: no %s header ref (every response declares it: headers: {%s: {$ref: \"#/components/headers/AgentdVersion\"}}, or $ref a components/responses entry that does)", r.method, r.path, n, versionHeader, versionHeader)
			}
			var slugs []string
			if _, ok := v.Extensions["x-errors"]; ok {
				var errs []struct{ Slug, Meaning string }
				ext(t, v.Extensions, "x-errors", &errs)
				for _, e := range errs {
					if e.Meaning == "" {
						t.Errorf("%s %s %d: slug %s has no meaning", r.method, r.path, n, e.Slug)
					}
					slugs = append(slugs, e.Slug)
				}
				checkSlugSchema(t, fmt.Sprintf("%s %s %d", r.method, r.path, n), v.Content.Get("application/json"), slugs)
			}
			if want := r.slugs[n]; !slices.Equal(slugs, want) {
				t.Errorf("%s %s %d: slugs %v, want %v (a new slug goes into api/errors.yaml's daemon_errors and this file's routes table; docs/ARCHITECTURE.md, \"Walkthrough: add an error slug\")", r.method, r.path, n, slugs, want)
			}
		}
		sort.Ints(got)
		want := slices.Clone(r.statuses)
		sort.Ints(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s %s: statuses %v, want %v (a new status is declared in openapi.yaml and in this file's routes table)", r.method, r.path, got, want)
		}
	}
}

func TestBearerRoutesAnswer401And503AndOpenRoutesDeclareNoAuth(t *testing.T) {
	doc := load(t)
	if s := doc.Components.SecuritySchemes["bearerAuth"]; s == nil || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
		t.Fatalf("components.securitySchemes.bearerAuth must be http bearer")
	}
	if len(doc.Security) != 0 {
		t.Errorf("security must be declared per operation, not at the top level")
	}
	for _, r := range routes {
		op := doc.Paths.Find(r.path).GetOperation(r.method)
		if op.Security == nil {
			t.Errorf("%s %s: security must be explicit", r.method, r.path)
			continue
		}
		sec := *op.Security
		isBearer := len(sec) == 1 && sec[0]["bearerAuth"] != nil
		if isBearer != r.bearer || (!r.bearer && len(sec) != 0) {
			t.Errorf("%s %s: security %v in openapi.yaml, bearer %v in this file's routes table (a bearer route declares security: [bearerAuth: []], an open one security: [])", r.method, r.path, sec, r.bearer)
		}
		if !r.bearer {
			continue
		}
		for _, code := range []int{http.StatusUnauthorized, http.StatusServiceUnavailable} {
			if op.Responses.Status(code) == nil {
				t.Errorf("%s %s: bearer route without %d (add \"401\": {$ref: \"#/components/responses/Unauthorized\"} and \"503\": {$ref: \"#/components/responses/NotBootstrapped\"})", r.method, r.path, code)
			}
		}
	}
}

func TestLimitsAreTheReferenceNumbers(t *testing.T) {
	doc := load(t)
	var limits map[string]struct {
		Value       float64 `json:"value"`
		Env         string  `json:"env"`
		Description string  `json:"description"`
	}
	ext(t, doc.Extensions, "x-limits", &limits)
	want := map[string]float64{
		"exec_ttl_secs":            900,
		"kill_grace_secs":          10,
		"max_body_bytes":           536870912,
		"max_drain_bytes":          65536,
		"max_output_bytes":         8388608,
		"max_stdin_write_bytes":    1048576,
		"max_tar_bytes":            8589934592,
		"max_tar_members":          100000,
		"output_linger_secs":       5,
		"sse_keepalive_secs":       15,
		"stdin_write_timeout_secs": 5,
		"stream_replay_bytes":      1048576,
		"sse_idle_timeout_secs":    60,
		"port":                     9000,
		"disk_reserve_bytes":       268435456,
		// Ours, not the reference's: a start body never needs more.
		"max_start_body_bytes": 1048576,
		// Ours too (issue 12): caps on what a hostile caller may hold.
		"max_exec_id_bytes":      1024,
		"open_body_timeout_secs": 10,
		"max_open_bodies":        16,
		"stream_stall_secs":      10,
		"max_header_bytes":       65536,
		// Ours (issue 21): the fs list page.
		"max_list_page":      10000,
		"list_page_default":  1000,
		"watch_queue_events": 1024,
		// Ours (issue 19): how long a poll of a running exec may wait for its exit.
		"poll_hold_secs": 0.02,
		// Ours (issue 19): a fast writer's first bytes wait for the stream a client attaches after its start.
		"stream_attach_grace_secs": 1,
		// Ours (issue 30): caps on connections and per-request kernel objects,
		// and the smallest exec timeout the daemon's timer honours.
		"max_connections":  1024,
		"max_watches":      16,
		"max_ptys":         64,
		"min_timeout_secs": 0.001,
	}
	// The reference daemon's own environment variable names (agentd/src/config.rs).
	wantEnv := map[string]string{
		"exec_ttl_secs":         "AGENTD_EXEC_TTL_SECS",
		"max_body_bytes":        "AGENTD_MAX_BODY_BYTES",
		"max_output_bytes":      "AGENTD_MAX_OUTPUT_BYTES",
		"max_stdin_write_bytes": "AGENTD_MAX_STDIN_WRITE_BYTES",
		"output_linger_secs":    "AGENTD_OUTPUT_LINGER_SECS",
		"sse_keepalive_secs":    "AGENTD_SSE_KEEPALIVE_SECS",
		"stream_replay_bytes":   "AGENTD_STREAM_BUFFER_BYTES",
		"port":                  "AGENTD_PORT",
		"disk_reserve_bytes":    "AGENTD_DISK_RESERVE_BYTES",
	}
	if len(limits) != len(want) {
		t.Errorf("x-limits has %d entries, want %d: a new limit is also listed in TestLimitsAreTheReferenceNumbers' table", len(limits), len(want))
	}
	for name, v := range want {
		got, ok := limits[name]
		if !ok {
			t.Errorf("x-limits.%s is missing", name)
			continue
		}
		if got.Value != v {
			t.Errorf("x-limits.%s = %v, want %v", name, got.Value, v)
		}
		if got.Description == "" {
			t.Errorf("x-limits.%s has no description", name)
		}
		if e, ok := wantEnv[name]; ok && got.Env != e {
			t.Errorf("x-limits.%s env = %q, want %q", name, got.Env, e)
		}
		// Fixed bounds, not settings: the idle timeout is the client's, and the
		// list page sizes (issue 21) keep one answer a few MiB whatever the env,
		// and the smallest timeout (issue 30) is the wire schema's minimum.
		fixed := name == "sse_idle_timeout_secs" || name == "max_list_page" || name == "list_page_default" || name == "watch_queue_events" || name == "min_timeout_secs"
		if !fixed && !strings.HasPrefix(got.Env, "AGENTD_") {
			t.Errorf("x-limits.%s env = %q, want an AGENTD_ variable", name, got.Env)
		}
	}
	// timeout_sec's schema minimum is min_timeout_secs, so a client refuses
	// locally what the daemon would.
	if ts := doc.Components.Schemas["StartRequest"].Value.Properties["timeout_sec"].Value; ts.Min == nil || *ts.Min != limits["min_timeout_secs"].Value || ts.ExclusiveMin.IsSet() {
		t.Errorf("StartRequest.timeout_sec minimum is not min_timeout_secs (%v), inclusive", limits["min_timeout_secs"].Value)
	}
	if idle, ka := limits["sse_idle_timeout_secs"].Value, limits["sse_keepalive_secs"].Value; idle != 4*ka {
		t.Errorf("sse_idle_timeout_secs = %v, want four keepalive intervals (%v)", idle, 4*ka)
	}
}

func TestTopLevelExtensions(t *testing.T) {
	doc := load(t)
	for key, want := range map[string]string{
		"x-protocol-version": "1",
		"x-version-header":   versionHeader,
		"x-hook-prefix":      hookPrefix,
	} {
		var got string
		ext(t, doc.Extensions, key, &got)
		if got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	var auth struct {
		Scheme, Header string
		Bootstrap      map[string]string
	}
	ext(t, doc.Extensions, "x-auth", &auth)
	if auth.Scheme != "bearer" || auth.Header != "authorization" {
		t.Errorf("x-auth = %+v", auth)
	}
	for _, k := range []string{"how", "before_bootstrap", "wrong_token", "note"} {
		if auth.Bootstrap[k] == "" {
			t.Errorf("x-auth.bootstrap.%s is missing", k)
		}
	}
	var unmatched struct {
		Code    int
		Meaning string
	}
	ext(t, doc.Extensions, "x-unmatched-path", &unmatched)
	if unmatched.Code != 404 || unmatched.Meaning == "" {
		t.Errorf("x-unmatched-path = %+v", unmatched)
	}
}

func TestSSEContract(t *testing.T) {
	doc := load(t)
	op := doc.Paths.Find("/v1/exec/{id}/stream").Get
	var sse struct {
		Events []struct {
			Event   string
			Meaning string
			Schema  struct {
				Ref string `json:"$ref"`
			}
		}
		Keepalive string
		Terminal  string
	}
	ext(t, op.Extensions, "x-sse", &sse)
	want := [][2]string{
		{"output", "#/components/schemas/OutputEvent"},
		{"gap", "#/components/schemas/GapEvent"},
		{"exit", "#/components/schemas/ExitEvent"},
	}
	if len(sse.Events) != len(want) {
		t.Fatalf("x-sse has %d events, want %d", len(sse.Events), len(want))
	}
	for i, w := range want {
		e := sse.Events[i]
		if e.Event != w[0] || e.Schema.Ref != w[1] || e.Meaning == "" {
			t.Errorf("x-sse event %d = %+v, want %s -> %s", i, e, w[0], w[1])
		}
		if doc.Components.Schemas[strings.TrimPrefix(w[1], "#/components/schemas/")] == nil {
			t.Errorf("%s does not resolve", w[1])
		}
	}
	if sse.Terminal != "exit" || sse.Keepalive == "" {
		t.Errorf("x-sse terminal %q keepalive %q", sse.Terminal, sse.Keepalive)
	}
	if op.Responses.Status(200).Value.Content.Get("text/event-stream") == nil {
		t.Errorf("stream 200 is not text/event-stream")
	}
}

// The query-shape schemas are published for schema consumers and the operations
// declare the same keys as parameters; the two must not drift apart.
func TestQuerySchemasMatchOperationParameters(t *testing.T) {
	doc := load(t)
	for _, c := range []struct{ schema, method, path string }{
		{"StreamQuery", "GET", "/v1/exec/{id}/stream"},
		{"FileReadQuery", "GET", "/v1/fs/file"},
		{"FsQuery", "PUT", "/v1/fs/file"},
	} {
		s := doc.Components.Schemas[c.schema].Value
		op := doc.Paths.Find(c.path).GetOperation(c.method)
		params := map[string]bool{}
		for _, p := range op.Parameters {
			if p.Value.In == openapi3.ParameterInQuery {
				params[p.Value.Name] = p.Value.Required
			}
		}
		props := map[string]bool{}
		for name := range s.Properties {
			props[name] = slices.Contains(s.Required, name)
		}
		if len(params) != len(props) {
			t.Errorf("%s: query parameters %v, schema %s properties %v", c.path, params, c.schema, props)
		}
		for name, req := range props {
			if got, ok := params[name]; !ok || got != req {
				t.Errorf("%s %s: %s required=%v in schema, parameter present=%v required=%v", c.method, c.path, name, req, ok, got)
			}
		}
	}
	for _, m := range []string{"GET", "PUT"} {
		op := doc.Paths.Find("/v1/fs/tar").GetOperation(m)
		if len(op.Parameters) != 1 || op.Parameters[0].Value.Name != "path" || !op.Parameters[0].Value.Required {
			t.Errorf("%s /v1/fs/tar must take exactly the required path query", m)
		}
	}
}

func TestWireShapes(t *testing.T) {
	doc := load(t)
	schemas := doc.Components.Schemas
	for _, name := range []string{
		"StartRequest", "StartResponse", "PollResponse", "Phase", "StreamKind", "OutputEvent",
		"GapEvent", "ExitEvent", "StdinRequest", "StdinResponse", "KillResponse", "Health",
		"DiskHealth", "RunHookEnvelope", "RunHookPayload", "ErrorBody", "StreamQuery", "FsQuery",
		"FileReadQuery",
	} {
		if schemas[name] == nil {
			t.Errorf("components.schemas.%s is missing", name)
		}
	}
	enum := func(name string) []any { return schemas[name].Value.Enum }
	if got := enum("Phase"); !slices.Equal(got, []any{"running", "exited", "acked"}) {
		t.Errorf("Phase enum %v", got)
	}
	if got := enum("StreamKind"); !slices.Equal(got, []any{"stdout", "stderr"}) {
		t.Errorf("StreamKind enum %v", got)
	}

	// A newer client must tolerate a daemon that predates busy and execs.
	h := schemas["Health"].Value
	for field, def := range map[string]any{"busy": false, "execs": float64(0)} {
		if slices.Contains(h.Required, field) {
			t.Errorf("Health.%s must not be required", field)
		}
		if got := h.Properties[field].Value.Default; got != def {
			t.Errorf("Health.%s default %v, want %v", field, got, def)
		}
	}
	if !slices.Contains(h.Required, "disk") || !h.Properties["disk"].Value.Nullable {
		t.Errorf("Health.disk must be required and nullable")
	}

	// Finished-exec fields are absent while running; exit_code and signal are null after a signal.
	p := schemas["PollResponse"].Value
	if !slices.Equal(p.Required, []string{"exec_id", "phase"}) {
		t.Errorf("PollResponse required %v", p.Required)
	}
	for _, f := range []string{"exit_code", "signal"} {
		if !p.Properties[f].Value.Nullable || !schemas["ExitEvent"].Value.Properties[f].Value.Nullable {
			t.Errorf("%s must be nullable on PollResponse and ExitEvent", f)
		}
	}

	rh := schemas["RunHookPayload"].Value
	if !slices.Equal(rh.Required, []string{"agent_token"}) {
		t.Errorf("RunHookPayload required %v", rh.Required)
	}
	if rh.AdditionalProperties.Has != nil && !*rh.AdditionalProperties.Has {
		t.Errorf("RunHookPayload must allow unknown keys")
	}
	if env := rh.Properties["env"].Value; env.AdditionalProperties.Schema == nil ||
		!env.AdditionalProperties.Schema.Value.Type.Is("string") {
		t.Errorf("RunHookPayload.env must map to strings")
	}
	if _, ok := schemas["RunHookEnvelope"].Value.Properties["runHookPayload"]; !ok {
		t.Errorf("RunHookEnvelope must carry runHookPayload")
	}
	if e := schemas["ErrorBody"].Value; !slices.Equal(e.Required, []string{"error", "detail"}) {
		t.Errorf("ErrorBody required %v", e.Required)
	}
}

// checkSlugSchema: a slugged response carries application/json, its schema is a
// named ErrorBody narrowed to exactly the slugs x-errors lists, so a generated
// client's type names the slugs the route can send.
// Catches: a slug added to x-errors but not to the body's enum (or the reverse),
// and a slugged response pointing at the bare ErrorBody or at text/plain.
func checkSlugSchema(t *testing.T, where string, mt *openapi3.MediaType, slugs []string) {
	t.Helper()
	if mt == nil || mt.Schema == nil || !strings.HasPrefix(mt.Schema.Ref, "#/components/schemas/Error") || mt.Schema.Ref == "#/components/schemas/ErrorBody" {
		t.Errorf("%s: a slugged response must carry an application/json Error* schema narrowing ErrorBody", where)
		return
	}
	s := mt.Schema.Value
	if len(s.AllOf) != 2 || s.AllOf[0].Ref != "#/components/schemas/ErrorBody" {
		t.Errorf("%s: %s must be allOf [ErrorBody, {error enum}]", where, mt.Schema.Ref)
		return
	}
	var enum []string
	if e := s.AllOf[1].Value.Properties["error"]; e != nil {
		for _, v := range e.Value.Enum {
			enum = append(enum, fmt.Sprint(v))
		}
	}
	if !slices.Equal(enum, slugs) {
		t.Errorf("%s: %s error enum %v, x-errors slugs %v (the Error* schema's error enum lists exactly its response's x-errors slugs)", where, mt.Schema.Ref, enum, slugs)
	}
}
