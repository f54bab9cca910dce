package api_test

import (
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// withoutExample are the media types allowed to go without an example: a tar
// stream is kilobytes of NUL-padded headers that YAML cannot usefully carry,
// and binary frames are bytes too (x-frames lays them out).
var withoutExample = map[string]bool{"application/x-tar": true, "application/vnd.microvms.frames": true}

// Every request and response body the contract declares has an example, and
// every example is valid against its own schema, so what generated clients and
// docs show is something the daemon could really send or accept.
// Catches: an example left behind when a schema is tightened (an enum, a
// minimum, a required field), a body added without an example, and an example
// in the wrong shape for its media type.
func TestEveryBodyHasAValidExample(t *testing.T) {
	doc := load(t)
	checked := 0
	check := func(where string, content openapi3.Content) {
		for mt, media := range content {
			if media.Schema == nil {
				t.Errorf("%s %s: no schema", where, mt)
				continue
			}
			var examples []any
			if media.Example != nil {
				examples = append(examples, media.Example)
			}
			for _, ex := range media.Examples {
				examples = append(examples, ex.Value.Value)
			}
			if len(examples) == 0 {
				if !withoutExample[mt] {
					t.Errorf("%s %s: no example", where, mt)
				}
				continue
			}
			for _, ex := range examples {
				checked++
				if err := media.Schema.Value.VisitJSON(ex, openapi3.MultiErrors()); err != nil {
					t.Errorf("%s %s: example does not match its schema: %v", where, mt, err)
				}
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.RequestBody != nil {
				check(where+" request", op.RequestBody.Value.Content)
			}
			for code, resp := range op.Responses.Map() {
				check(where+" "+code, resp.Value.Content)
			}
		}
	}
	// 16 operations with bodies between them; far fewer checked means the walk broke.
	if checked < 30 {
		t.Fatalf("only %d examples checked", checked)
	}
}

// The shapes the issue found generators and validators getting wrong: a null
// disk, a uid past int32, the stdin signal, the start constraints.
// Catches: Health.disk losing its nullability (null rejected under 3.0.3
// rules), an integer narrowed to int32, and each constraint being dropped.
func TestSchemasEncodeTheConstraints(t *testing.T) {
	doc := load(t)
	schema := func(name string) *openapi3.Schema { return doc.Components.Schemas[name].Value }
	cases := []struct {
		schema string
		value  map[string]any
		ok     bool
	}{
		{"Health", map[string]any{"version": "1", "bootstrapped": true, "disk": nil, "identity_degraded": false, "identity_repaired": true}, true},
		{"Health", map[string]any{"version": "1", "bootstrapped": true, "identity_degraded": false, "identity_repaired": true}, false},
		{"DiskHealth", map[string]any{"available_bytes": float64(80635920384), "reserve_bytes": float64(0), "under_pressure": false}, true},
		{"DiskHealth", map[string]any{"available_bytes": float64(-1), "reserve_bytes": float64(0), "under_pressure": false}, false},
		{"StartRequest", map[string]any{"exec_id": "a", "command": []any{"true"}, "user": float64(4294967295)}, true},
		{"StartRequest", map[string]any{"exec_id": "a", "command": []any{"true"}, "user": float64(4294967296)}, false},
		{"StartRequest", map[string]any{"exec_id": "", "command": []any{"true"}}, false},
		{"StartRequest", map[string]any{"exec_id": "a", "command": []any{"true"}, "timeout_sec": float64(0)}, false},
		{"StartRequest", map[string]any{"exec_id": "a", "command": []any{"true"}, "timeout_sec": 0.5}, true},
		{"StdinRequest", map[string]any{"signal": "eof"}, true},
		{"StdinRequest", map[string]any{"signal": "close"}, false},
		{"RunHookEnvelope", map[string]any{}, false},
		{"ErrorAckConflict", map[string]any{"error": "already_acked", "detail": "x"}, true},
		{"ErrorAckConflict", map[string]any{"error": "unknown_exec", "detail": "x"}, false},
		{"SSEEvent", map[string]any{"event": "gap", "data": map[string]any{"from": float64(0), "to": float64(10)}}, true},
		{"SSEEvent", map[string]any{"event": "gap", "data": map[string]any{"offset": float64(0), "stream": "stdout", "output": ""}}, false},
	}
	for i, c := range cases {
		err := schema(c.schema).VisitJSON(c.value)
		if (err == nil) != c.ok {
			t.Errorf("case %d: %s %v: valid=%v, want %v (%v)", i, c.schema, c.value, err == nil, c.ok, err)
		}
	}
	mode := doc.Paths.Find("/v1/fs/file").Put.Parameters.GetByInAndName("query", "mode").Schema.Value
	for v, ok := range map[string]bool{"0644": true, "644": true, "0o755": true, "07777": true, "0999": false, "17777": false, "": false} {
		if err := mode.VisitJSON(v); (err == nil) != ok {
			t.Errorf("mode %q: valid=%v, want %v", v, err == nil, ok)
		}
	}
	// Every integer uses a format generators know (int32/int64), never uint*.
	for name, ref := range doc.Components.Schemas {
		walkSchema(ref, name, func(where string, s *openapi3.Schema) {
			if s.Type.Is("integer") && s.Format != "int32" && s.Format != "int64" {
				t.Errorf("%s: integer format %q", where, s.Format)
			}
			if strings.HasPrefix(s.Format, "uint") {
				t.Errorf("%s: non-standard format %q", where, s.Format)
			}
		})
	}
	// The same holds for parameters and headers (the stream route's offset
	// query once said uint64): the unsigned Go type travels in x-go-type.
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Find(path).Operations() {
			for _, p := range op.Parameters {
				if p.Value == nil {
					continue
				}
				where := method + " " + path + " " + p.Value.In + " " + p.Value.Name
				walkSchema(p.Value.Schema, where, func(where string, s *openapi3.Schema) {
					if s.Type.Is("integer") && s.Format != "int32" && s.Format != "int64" {
						t.Errorf("%s: integer format %q", where, s.Format)
					}
				})
			}
		}
	}
	for name, h := range doc.Components.Headers {
		if h.Value == nil {
			continue
		}
		walkSchema(h.Value.Schema, "header "+name, func(where string, s *openapi3.Schema) {
			if s.Type.Is("integer") && s.Format != "int32" && s.Format != "int64" {
				t.Errorf("%s: integer format %q", where, s.Format)
			}
		})
	}
}

func walkSchema(ref *openapi3.SchemaRef, where string, f func(string, *openapi3.Schema)) {
	if ref == nil || ref.Value == nil || ref.Ref != "" && where != "" && strings.Contains(where, ".") {
		return
	}
	s := ref.Value
	f(where, s)
	for name, p := range s.Properties {
		walkSchema(p, where+"."+name, f)
	}
	if s.Items != nil {
		walkSchema(s.Items, where+"[]", f)
	}
	for _, sub := range append(append(s.AllOf, s.OneOf...), s.AnyOf...) {
		walkSchema(sub, where+".*", f)
	}
}
