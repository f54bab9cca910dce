package cplane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
	"gopkg.in/yaml.v3"
)

const ns = "com.amazonaws.lambdamicrovms#"

type smithyShape struct {
	Type    string                     `json:"type"`
	Traits  map[string]json.RawMessage `json:"traits"`
	Members map[string]smithyMember    `json:"members"`
	Member  *smithyMember              `json:"member"`
	Key     *smithyMember              `json:"key"`
	Value   *smithyMember              `json:"value"`
	Input   *struct{ Target string }   `json:"input"`
	Output  *struct{ Target string }   `json:"output"`
	Errors  []struct{ Target string }  `json:"errors"`
}

type smithyMember struct {
	Target string                     `json:"target"`
	Traits map[string]json.RawMessage `json:"traits"`
}

// crossCheck holds both documents and collects mismatches.
type crossCheck struct {
	t         *testing.T
	shapesRaw map[string]json.RawMessage
	spec      map[string]any
}

func (c *crossCheck) shape(id string) smithyShape {
	var s smithyShape
	if raw, ok := c.shapesRaw[id]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

func loadSpec(t *testing.T) map[string]any {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "api", "lambda-microvms.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func get(m any, path ...string) any {
	for _, p := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[p]
	}
	return m
}

func traitNum(traits map[string]json.RawMessage, trait, key string) *float64 {
	raw, ok := traits["smithy.api#"+trait]
	if !ok {
		return nil
	}
	var m map[string]float64
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	if v, ok := m[key]; ok {
		return &v
	}
	return nil
}

func traitStr(traits map[string]json.RawMessage, trait string) (string, bool) {
	raw, ok := traits["smithy.api#"+trait]
	if !ok {
		return "", false
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s, true
}

func num(v any) *float64 {
	switch x := v.(type) {
	case int:
		f := float64(x)
		return &f
	case float64:
		return &x
	}
	return nil
}

func eqNum(a, b *float64) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func fmtNum(a *float64) string {
	if a == nil {
		return "none"
	}
	return strconv.FormatFloat(*a, 'f', -1, 64)
}

// merged is a member's effective traits: its target's, overridden by its own.
func merged(target map[string]json.RawMessage, member map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, v := range target {
		out[k] = v
	}
	for k, v := range member {
		out[k] = v
	}
	return out
}

var prelude = map[string]string{"smithy.api#String": "string", "smithy.api#Integer": "integer", "smithy.api#Long": "long", "smithy.api#Boolean": "boolean", "smithy.api#Timestamp": "timestamp", "smithy.api#Unit": "unit"}

// member compares one Smithy member with its YAML schema at where.
func (c *crossCheck) member(where string, m smithyMember, y any) {
	t := c.t
	ys, _ := y.(map[string]any)
	if ys == nil {
		t.Errorf("%s: missing from the YAML", where)
		return
	}
	overrides := map[string]bool{}
	if o, ok := get(ys, "x-measured", "overrides").([]any); ok {
		for _, k := range o {
			overrides[fmt.Sprint(k)] = true
		}
	}
	kind, target := prelude[m.Target], smithyShape{}
	if kind == "" {
		target = c.shape(m.Target)
		kind = target.Type
	}
	ref, _ := ys["$ref"].(string)
	if all, ok := ys["allOf"].([]any); ok && len(all) == 1 {
		ref, _ = get(all[0], "$ref").(string)
	}
	switch kind {
	case "structure", "union", "enum", "unit":
		want := "#/components/schemas/" + strings.TrimPrefix(m.Target, ns)
		if kind == "unit" {
			want = "#/components/schemas/Unit"
		}
		if ref != want {
			t.Errorf("%s: $ref %q, want %q", where, ref, want)
		}
		return
	}
	tr := merged(target.Traits, m.Traits)
	yt, _ := ys["type"].(string)
	wantType := map[string]string{"string": "string", "integer": "integer", "long": "integer", "boolean": "boolean", "timestamp": "number", "list": "array", "map": "object"}[kind]
	if yt != wantType {
		t.Errorf("%s: type %q, want %q (smithy %s)", where, yt, wantType, kind)
		return
	}
	if kind == "long" && ys["format"] != "int64" || kind == "integer" && ys["format"] != nil {
		t.Errorf("%s: format %v does not match smithy %s", where, ys["format"], kind)
	}
	if kind == "timestamp" && ys["x-timestamp-format"] != "epoch-seconds" {
		t.Errorf("%s: timestamps are epoch seconds on the wire", where)
	}
	minK, maxK := map[string][2]string{"string": {"minLength", "maxLength"}, "list": {"minItems", "maxItems"}, "map": {"minProperties", "maxProperties"}}[kind][0], map[string][2]string{"string": {"minLength", "maxLength"}, "list": {"minItems", "maxItems"}, "map": {"minProperties", "maxProperties"}}[kind][1]
	if minK != "" {
		for _, p := range [][3]string{{"min", minK}, {"max", maxK}} {
			if want, got := traitNum(tr, "length", p[0]), num(ys[p[1]]); !eqNum(want, got) && !overrides[p[1]] {
				t.Errorf("%s: %s %s, model length %s %s", where, p[1], fmtNum(got), p[0], fmtNum(want))
			}
		}
	}
	if kind == "integer" || kind == "long" {
		for _, p := range [][2]string{{"min", "minimum"}, {"max", "maximum"}} {
			if want, got := traitNum(tr, "range", p[0]), num(ys[p[1]]); !eqNum(want, got) && !overrides[p[1]] {
				t.Errorf("%s: %s %s, model range %s %s", where, p[1], fmtNum(got), p[0], fmtNum(want))
			}
		}
	}
	if pat, ok := traitStr(tr, "pattern"); (ok || ys["pattern"] != nil) && !overrides["pattern"] && ys["pattern"] != pat {
		t.Errorf("%s: pattern %v, model %q", where, ys["pattern"], pat)
	}
	switch kind {
	case "list":
		c.member(where+"[]", *target.Member, ys["items"])
	case "map":
		c.member(where+"{key}", *target.Key, ys["x-key"])
		c.member(where+"{value}", *target.Value, ys["additionalProperties"])
	}
}

// object compares a structure's members (only those bound to the body when
// body is true) with a YAML object schema.
func (c *crossCheck) object(where string, s smithyShape, y any, bodyOnly bool) {
	props, _ := get(y, "properties").(map[string]any)
	var want, required []string
	for name, m := range s.Members {
		if bodyOnly && (m.Traits["smithy.api#httpLabel"] != nil || m.Traits["smithy.api#httpQuery"] != nil || m.Traits["smithy.api#httpHeader"] != nil) {
			continue
		}
		want = append(want, name)
		if m.Traits["smithy.api#required"] != nil {
			required = append(required, name)
		}
		c.member(where+"."+name, m, props[name])
	}
	var got, gotReq []string
	for name := range props {
		got = append(got, name)
	}
	gotReq = append(gotReq, asList(get(y, "required"))...)
	sort.Strings(want)
	sort.Strings(got)
	sort.Strings(required)
	sort.Strings(gotReq)
	if !slices.Equal(want, got) {
		c.t.Errorf("%s: YAML members %v, model members %v", where, got, want)
	}
	if !slices.Equal(required, gotReq) {
		c.t.Errorf("%s: YAML required %v, model required %v", where, gotReq, required)
	}
}

func asList(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func schemaRef(y any) string {
	r, _ := get(y, "content", "application/json", "schema", "$ref").(string)
	return strings.TrimPrefix(r, "#/components/schemas/")
}

// Catches: a renamed, dropped or invented member; a changed binding (label,
// query name, body); a required flag; an enum value; a length, range or
// pattern constraint; an operation's method, URI, success code or error
// statuses, anywhere in api/lambda-microvms.yaml. Differences are allowed
// only where an x-measured note lists them as overrides.
func TestYAMLMatchesTheSmithyModel(t *testing.T) {
	raw := loadModel(t, "api/lambda-microvms.yaml against the Smithy model (operations, members, bindings, required flags, enums, constraints)")
	c := &crossCheck{t: t, shapesRaw: raw, spec: loadSpec(t)}
	schemas, _ := get(c.spec, "components", "schemas").(map[string]any)
	ops := 0
	for id := range raw {
		op := c.shape(id)
		if op.Type != "operation" {
			continue
		}
		ops++
		name := strings.TrimPrefix(id, ns)
		var http struct {
			Method, URI string
			Code        int
		}
		_ = json.Unmarshal(op.Traits["smithy.api#http"], &http)
		y := get(c.spec, "paths", http.URI, strings.ToLower(http.Method))
		if y == nil {
			t.Errorf("%s: no %s %s in the YAML", name, http.Method, http.URI)
			continue
		}
		if get(y, "operationId") != name {
			t.Errorf("%s %s: operationId %v, want %s", http.Method, http.URI, get(y, "operationId"), name)
		}
		// Bindings.
		in := c.shape(op.Input.Target)
		params := map[string]map[string]any{}
		plist, _ := get(y, "parameters").([]any)
		for _, p := range plist {
			pm := p.(map[string]any)
			params[fmt.Sprint(pm["in"])+":"+fmt.Sprint(pm["name"])] = pm
		}
		bound := 0
		for mn, m := range in.Members {
			var key string
			if m.Traits["smithy.api#httpLabel"] != nil {
				key = "path:" + mn
			} else if q, ok := traitStr(m.Traits, "httpQuery"); ok {
				key = "query:" + q
			} else {
				continue
			}
			bound++
			p := params[key]
			if p == nil {
				t.Errorf("%s: parameter %s missing", name, key)
				continue
			}
			if req := m.Traits["smithy.api#required"] != nil; req != (p["required"] == true) {
				t.Errorf("%s: parameter %s required=%v, model %v", name, key, p["required"], req)
			}
			c.member(name+" "+key, m, p["schema"])
		}
		if bound != len(params) {
			t.Errorf("%s: YAML has %d parameters, model binds %d", name, len(params), bound)
		}
		body := get(y, "requestBody")
		c.bodyCheck(name+" request", in, body, schemas)
		// Responses.
		responses, _ := get(y, "responses").(map[string]any)
		codes := map[string]bool{strconv.Itoa(http.Code): true}
		for _, e := range op.Errors {
			es := c.shape(e.Target)
			var code int
			_ = json.Unmarshal(es.Traits["smithy.api#httpError"], &code)
			codes[strconv.Itoa(code)] = true
			want := "#/components/responses/" + strings.TrimPrefix(e.Target, ns)
			if get(responses, strconv.Itoa(code), "$ref") != want {
				t.Errorf("%s: HTTP %d should be %s", name, code, want)
			}
		}
		for code := range responses {
			if !codes[code] {
				t.Errorf("%s: YAML answers %s, the model does not", name, code)
			}
		}
		if out := op.Output.Target; out != "smithy.api#Unit" {
			c.bodyCheck(name+" response", c.shape(out), responses[strconv.Itoa(http.Code)], schemas)
		} else if get(responses, strconv.Itoa(http.Code), "content") != nil {
			t.Errorf("%s: the model's output is Unit but the YAML declares a body", name)
		}
	}
	if ops != 24 {
		t.Errorf("the model has %d operations; the issue expects 24", ops)
	}
	// Named shapes: enums, unions and the non-operation structures.
	for id := range raw {
		s, name := c.shape(id), strings.TrimPrefix(id, ns)
		switch {
		case s.Type == "enum":
			var want []string
			for _, m := range s.Members {
				v, _ := traitStr(m.Traits, "enumValue")
				want = append(want, v)
			}
			got := asList(get(schemas, name, "enum"))
			sort.Strings(want)
			sort.Strings(got)
			if !slices.Equal(want, got) {
				t.Errorf("enum %s: YAML %v, model %v", name, got, want)
			}
		case s.Type == "union":
			if get(schemas, name, "x-smithy-union") != true || num(get(schemas, name, "maxProperties")) == nil || *num(get(schemas, name, "maxProperties")) != 1 {
				t.Errorf("union %s must be a single-key object", name)
			}
			c.object("union "+name, s, schemas[name], false)
		case s.Type == "structure" && s.Traits["smithy.api#input"] == nil && s.Traits["smithy.api#output"] == nil:
			c.object("structure "+name, s, schemas[name], true)
		}
	}
	// Every x-measured note names a registered finding.
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, vv := range x {
				if k == "x-measured" || k == "x-client" {
					if f, ok := get(vv, "finding").(string); ok && taxonomy.FindingID(f).Title() == "" {
						t.Errorf("x-measured names %q, which is not in the findings registry", f)
					}
				}
				walk(vv)
			}
		case []any:
			for _, vv := range x {
				walk(vv)
			}
		}
	}
	walk(c.spec)
}

func (c *crossCheck) bodyCheck(where string, s smithyShape, y any, schemas map[string]any) {
	hasBody := false
	for _, m := range s.Members {
		hasBody = hasBody || (m.Traits["smithy.api#httpLabel"] == nil && m.Traits["smithy.api#httpQuery"] == nil && m.Traits["smithy.api#httpHeader"] == nil)
	}
	ref := schemaRef(y)
	if !hasBody {
		if ref != "" && len(get(schemas, ref, "properties").(map[string]any)) > 0 {
			c.t.Errorf("%s: the model binds no body members but the YAML declares some", where)
		}
		return
	}
	if ref == "" {
		c.t.Errorf("%s: no JSON body schema", where)
		return
	}
	c.object(where+" "+ref, s, schemas[ref], true)
}

// Catches: a service constant in api/errors.yaml drifting from the model it
// was read from (e.g. someone "correcting" 4096 to the prose's 16384).
func TestServiceConstantsMatchTheModel(t *testing.T) {
	raw := loadModel(t, "api/errors.yaml's service constants against the Smithy model")
	c := &crossCheck{t: t, shapesRaw: raw}
	mem := func(shape, member string) map[string]json.RawMessage {
		s := c.shape(ns + shape)
		m, ok := s.Members[member]
		if !ok {
			t.Fatalf("model has no %s.%s", shape, member)
		}
		return merged(c.shape(m.Target).Traits, m.Traits)
	}
	check := func(name string, want int, got *float64) {
		if got == nil || int(*got) != want {
			t.Errorf("%s = %d, model says %s", name, want, fmtNum(got))
		}
	}
	check("MaxRunHookPayloadBytes", taxonomy.MaxRunHookPayloadBytes, traitNum(mem("RunMicrovmRequest", "runHookPayload"), "length", "max"))
	check("MaxDurationSec", taxonomy.MaxDurationSec, traitNum(mem("RunMicrovmRequest", "maximumDurationInSeconds"), "range", "max"))
	check("MinDurationSec", taxonomy.MinDurationSec, traitNum(mem("RunMicrovmRequest", "maximumDurationInSeconds"), "range", "min"))
	check("MaxClientTokenLen", taxonomy.MaxClientTokenLen, traitNum(mem("CreateMicrovmImageRequest", "clientToken"), "length", "max"))
	check("MaxClientTokenLen (RunMicrovm)", taxonomy.MaxClientTokenLen, traitNum(mem("RunMicrovmRequest", "clientToken"), "length", "max"))
	check("MaxImageNameLen", taxonomy.MaxImageNameLen, traitNum(mem("CreateMicrovmImageRequest", "name"), "length", "max"))
	check("MaxImageVersionLen", taxonomy.MaxImageVersionLen, traitNum(mem("RunMicrovmRequest", "imageVersion"), "length", "max"))
	check("MinIdleDurationSec", taxonomy.MinIdleDurationSec, traitNum(mem("IdlePolicy", "maxIdleDurationSeconds"), "range", "min"))
	check("MaxRunHookTimeoutSec", taxonomy.MaxRunHookTimeoutSec, traitNum(mem("MicrovmHooks", "runTimeoutInSeconds"), "range", "max"))
	check("MaxBuildHookTimeoutSec", taxonomy.MaxBuildHookTimeoutSec, traitNum(mem("MicrovmImageHooks", "readyTimeoutInSeconds"), "range", "max"))
	check("MaxNetworkConnectors", taxonomy.MaxNetworkConnectors, traitNum(c.shape(ns+"NetworkConnectorList").Traits, "length", "max"))
	// The model's prose for runHookPayload states the larger, wrong figure;
	// when AWS fixes it this goes red and the warning can go.
	doc, _ := traitStr(c.shape(ns + "RunMicrovmRequest").Members["runHookPayload"].Traits, "documentation")
	if !strings.Contains(strings.ReplaceAll(doc, ",", ""), strconv.Itoa(taxonomy.DocumentedRunHookPayloadBytes)) {
		t.Errorf("DocumentedRunHookPayloadBytes %d no longer appears in the model's prose: %q", taxonomy.DocumentedRunHookPayloadBytes, doc)
	}
	enum := func(shape string) []string {
		var out []string
		for _, m := range c.shape(ns + shape).Members {
			v, _ := traitStr(m.Traits, "enumValue")
			out = append(out, v)
		}
		sort.Strings(out)
		return out
	}
	sorted := func(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }
	for _, e := range []struct {
		name  string
		shape string
		got   []string
	}{
		{"MicrovmStates", "MicrovmState", taxonomy.MicrovmStates},
		{"ImageStates", "MicrovmImageState", taxonomy.ImageStates},
		{"BuildStates", "BuildState", taxonomy.BuildStates},
		{"Architecture", "Architecture", []string{taxonomy.Architecture}},
	} {
		if !slices.Equal(sorted(e.got), enum(e.shape)) {
			t.Errorf("%s %v, model enum %s %v", e.name, e.got, e.shape, enum(e.shape))
		}
	}
}
