package agentd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRunHookPayload drives the run hook's payload parser with arbitrary
// bytes. Properties: it never panics; success means a non-empty token and an
// env of valid keys; and a refusal never quotes a string value from the
// payload (the payload carries the agent token).
func FuzzRunHookPayload(f *testing.F) {
	for _, seed := range []string{
		`{"agent_token":"tok"}`,
		`{"agent_token":"tok","env":{"A":"1","EMPTY":""}}`,
		`{"agent_token":"tok","env":null,"future":[1,{"x":2}]}`,
		`{"agent_token":"secret-value","env":{"PORT":8080}}`,
		`{"agent_token":"secret-value","env":"A=1"}`,
		`{"agent_token":""}`, `{"env":{}}`, `[]`, `null`, `"str"`, `{`, ``,
		`{"agent_token":"t\u00f6k","env":{"K\u0000":"v"}}`,
		`{"agent_token":"tok","env":{"A=B":"secret-value"}}`,
		`{"agent_token":"tok","agent_token":"dup"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		token, env, err := parseRunHookPayload(raw)
		if err == nil {
			if len(token) == 0 {
				t.Fatal("accepted an empty token")
			}
			for k := range env {
				if !validEnvKey(k) {
					t.Fatalf("accepted env key %q", k)
				}
			}
			return
		}
		if token != nil || env != nil {
			t.Fatal("a refusal returned a token or env")
		}
		// Every string value in the payload, at any depth, must be absent
		// from the message (keys may be named; values never).
		var v any
		if json.Unmarshal([]byte(raw), &v) == nil {
			keys := strings.Join(objectKeys(v), "\x00")
			for _, s := range stringValues(v) {
				// A value that happens to be part of the fixed wording or of
				// a key (keys may be named) is a coincidence, not a leak.
				if len(s) >= 4 && strings.Contains(err.Error(), s) &&
					!strings.Contains(refusalWording, s) && !strings.Contains(keys, s) {
					t.Fatalf("refusal %q quotes the value %q", err, s)
				}
			}
		}
		if !utf8.ValidString(err.Error()) {
			t.Fatalf("refusal is not UTF-8: %q", err)
		}
	})
}

// refusalWording is every fixed sentence a refusal can contain.
var refusalWording = strings.Join([]string{
	errEnvelopeNotJSON.Error(), errEnvelopeNoPayload.Error(), errPayloadNotObject.Error(),
	errTokenMissing.Error(), errTokenEmpty.Error(), errEnvNotObject.Error(),
	errEnvValue("").Error(), errEnvKey(0).Error(),
}, "\x00")

// objectKeys lists every object key in a JSON value.
func objectKeys(v any) []string {
	var out []string
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			out = append(out, objectKeys(e)...)
		}
	case map[string]any:
		for k, e := range x {
			out = append(out, k)
			out = append(out, objectKeys(e)...)
		}
	}
	return out
}

// stringValues lists the string values (not object keys) in a JSON value.
func stringValues(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, stringValues(e)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, e := range x {
			out = append(out, stringValues(e)...)
		}
		return out
	}
	return nil
}

// FuzzStreamOffsetQuery sends arbitrary query strings to the real stream
// route (auth, generated binding, handler). Properties: never a 5xx or a
// panic; a 400 only when offset is present and not one uint64; otherwise the
// request reaches the handler (404 unknown exec) — never a 401 or 503 for an
// authorized caller.
func FuzzStreamOffsetQuery(f *testing.F) {
	for _, seed := range []string{
		"", "offset=0", "offset=42", "offset=18446744073709551615", "offset=18446744073709551616",
		"offset=-1", "offset=abc", "offset=1.5", "offset=", "offset=1&offset=2", "offset=%zz",
		"offset=+5", "offset=0x10", "other=1", "offset=%31%32", "&&", "offset=1;offset=2",
	} {
		f.Add(seed)
	}
	srv, err := NewServer(testConfig(), testLogger(f))
	if err != nil {
		f.Fatal(err)
	}
	srv.boot.install([]byte(testToken), map[string]string{})
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, query string) {
		if strings.ContainsAny(query, " #\r\n\x00") || !utf8.ValidString(query) {
			return // not a request line an HTTP client can send
		}
		req, err := http.NewRequest("GET", "http://agentd/v1/exec/unknown/stream?"+query, nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		q, qerr := url.ParseQuery(req.URL.RawQuery)
		switch w.Code {
		case http.StatusNotFound:
			if qerr == nil && q.Has("offset") {
				if _, err := strconv.ParseUint(q.Get("offset"), 10, 64); err != nil && q.Get("offset") != "" {
					t.Fatalf("offset %q was accepted", q.Get("offset"))
				}
			}
		case http.StatusBadRequest:
			if !strings.Contains(w.Body.String(), "malformed_request") {
				t.Fatalf("a 400 without the malformed_request slug: %s", w.Body)
			}
		default:
			t.Fatalf("query %q answered %d", query, w.Code)
		}
		if w.Header().Get("microvms-agentd-version") == "" {
			t.Fatal("no version header")
		}
	})
}
