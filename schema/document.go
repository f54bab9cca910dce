package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// jsonSchemaDialect is the dialect docs/schema.json's $defs are written in.
const jsonSchemaDialect = "https://json-schema.org/draft/2020-12/schema"

// SchemaID is docs/schema.json's $id: where the document lives in the
// repository, so $defs can be referenced from other schemas by absolute URI.
const SchemaID = "https://github.com/microvms/microvms/docs/schema.json"

// methodOrder fixes the order routes sharing a path are listed in.
var methodOrder = []string{"get", "put", "post", "patch", "delete"}

// RouteStatus is one status a route can answer, with its error slug.
type RouteStatus struct {
	Code    int    `json:"code"`
	Error   string `json:"error"`
	Meaning string `json:"meaning"`
}

// Route is one operation of agentd protocol v1 as docs/schema.json lists it.
type Route struct {
	Method      string         `json:"method"`
	Path        string         `json:"path"`
	OperationID string         `json:"operation_id"`
	Auth        string         `json:"auth"`
	Summary     string         `json:"summary"`
	Query       any            `json:"query,omitempty"`
	Request     any            `json:"request"`
	Response    any            `json:"response"`
	SSEEvents   any            `json:"sse_events,omitempty"`
	Statuses    []RouteStatus  `json:"statuses"`
	Extra       map[string]any `json:"-"`
}

// toJSONSchema converts an OpenAPI 3.0 schema object to JSON Schema 2020-12:
// `nullable` becomes a null type, component refs become $defs refs, and
// extensions are dropped.
func toJSONSchema(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			switch {
			case k == "nullable" || k == "discriminator" || strings.HasPrefix(k, "x-"):
				// discriminator is OpenAPI's; in JSON Schema the oneOf branches'
				// event enums already decide, and strict readers refuse the keyword.
				continue
			case k == "exclusiveMinimum" || k == "exclusiveMaximum":
				// OpenAPI 3.0's boolean form becomes 2020-12's number form below.
				continue
			case k == "$ref":
				out[k] = strings.Replace(asString(val), "#/components/schemas/", "#/$defs/", 1)
			case k == "example":
				out["examples"] = []any{toJSONSchema(val)}
			case k == "properties":
				props := map[string]any{}
				for name, p := range asMap(val) {
					props[name] = toJSONSchema(p)
				}
				out[k] = props
			default:
				out[k] = toJSONSchema(val)
			}
		}
		for excl, bound := range map[string]string{"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"} {
			if x[excl] == true {
				out[excl] = out[bound]
				delete(out, bound)
			}
		}
		if x["nullable"] == true {
			switch t := out["type"].(type) {
			case string:
				out["type"] = []any{t, "null"}
				if enum, ok := out["enum"].([]any); ok {
					out["enum"] = append(enum, nil)
				}
			default:
				if ref, ok := out["$ref"]; ok {
					delete(out, "$ref")
					out["anyOf"] = []any{map[string]any{"$ref": ref}, map[string]any{"type": "null"}}
				} else if all, ok := out["allOf"].([]any); ok && len(all) == 1 {
					delete(out, "allOf")
					out["anyOf"] = []any{all[0], map[string]any{"type": "null"}}
				}
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toJSONSchema(e)
		}
		return out
	default:
		return v
	}
}

// resolveRef follows a local "#/components/..." reference inside doc.
func resolveRef(doc map[string]any, v any) map[string]any {
	m := asMap(v)
	ref := asString(m["$ref"])
	if ref == "" {
		return m
	}
	cur := any(doc)
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		cur = asMap(cur)[part]
	}
	return asMap(cur)
}

// body describes a request or response body: its media type and either a
// schema reference or a note for bodies that are bytes.
func body(content map[string]any) any {
	if len(content) == 0 {
		return nil
	}
	types := make([]string, 0, len(content))
	for mt := range content {
		types = append(types, mt)
	}
	sort.Strings(types)
	mt := types[0]
	for _, t := range types {
		if t == "application/json" || t == "text/event-stream" {
			mt = t
		}
	}
	media := asMap(content[mt])
	out := map[string]any{"media_type": mt}
	if s := asMap(media["schema"]); s != nil {
		if _, isRef := s["$ref"]; isRef {
			out["schema"] = toJSONSchema(s)
		} else if d := asString(s["description"]); d != "" {
			out["note"] = d
		}
	}
	if d := asString(media["x-note"]); d != "" {
		out["note"] = d
	}
	return out
}

// Routes lists every operation of api/openapi.yaml in document order.
func Routes(root string) ([]Route, error) {
	node, doc, err := loadOpenAPI(root)
	if err != nil {
		return nil, err
	}
	return routes(node, doc)
}

// routeSummary is the sentence docs/schema.json gives a route: the
// operation's description, which says what it does and what it guarantees; the
// OpenAPI summary is only a short title for generated clients and viewers.
func routeSummary(op map[string]any) string {
	if d := strings.TrimSpace(asString(op["description"])); d != "" {
		return d
	}
	return strings.TrimSpace(asString(op["summary"]))
}

func routes(node *yaml.Node, doc map[string]any) ([]Route, error) {
	paths := asMap(doc["paths"])
	var out []Route
	for _, path := range mappingKeys(node, "paths") {
		item := asMap(paths[path])
		for _, method := range methodOrder {
			op := asMap(item[method])
			if op == nil {
				continue
			}
			r := Route{
				Method:      strings.ToUpper(method),
				Path:        path,
				OperationID: asString(op["operationId"]),
				Auth:        "none",
				Summary:     routeSummary(op),
			}
			if sec, ok := op["security"].([]any); ok && len(sec) > 0 && len(asMap(sec[0])) > 0 {
				r.Auth = "bearer"
			} else if strings.HasPrefix(path, asString(doc["x-hook-prefix"])) {
				r.Auth = "none (platform hook)"
			}
			// x-query-schema is a $ref object, so linters and readers see the
			// component as used.
			if q := asString(asMap(op["x-query-schema"])["$ref"]); q != "" {
				r.Query = map[string]any{
					"media_type": "application/x-www-form-urlencoded",
					"schema":     toJSONSchema(map[string]any{"$ref": q}),
				}
			}
			if rb := resolveRef(doc, op["requestBody"]); rb != nil {
				r.Request = body(asMap(rb["content"]))
			}
			responses := asMap(op["responses"])
			for _, code := range mappingKeys(node, "paths", path, method, "responses") {
				resp := resolveRef(doc, responses[code])
				var status int
				if _, err := fmt.Sscanf(code, "%d", &status); err != nil {
					return nil, fmt.Errorf("%s %s: response %q is not a status code", r.Method, path, code)
				}
				if status >= 200 && status < 300 && r.Response == nil {
					r.Response = body(asMap(resp["content"]))
				}
				slugs, _ := resp["x-errors"].([]any)
				if len(slugs) == 0 {
					r.Statuses = append(r.Statuses, RouteStatus{Code: status, Meaning: strings.TrimSpace(asString(resp["description"]))})
				}
				for _, s := range slugs {
					sm := asMap(s)
					r.Statuses = append(r.Statuses, RouteStatus{Code: status, Error: asString(sm["slug"]), Meaning: asString(sm["meaning"])})
				}
			}
			if sse := asMap(op["x-sse"]); sse != nil {
				var events []any
				for _, e := range sse["events"].([]any) {
					em := asMap(e)
					events = append(events, map[string]any{
						"event":   em["event"],
						"meaning": em["meaning"],
						"schema":  toJSONSchema(em["schema"]),
					})
				}
				r.SSEEvents = events
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func generateDocument(root string) ([]Output, error) {
	node, doc, err := loadOpenAPI(root)
	if err != nil {
		return nil, err
	}
	tax, err := LoadTaxonomy(root)
	if err != nil {
		return nil, err
	}
	rs, err := routes(node, doc)
	if err != nil {
		return nil, err
	}
	limits := map[string]any{}
	for name, l := range asMap(doc["x-limits"]) {
		limits[name] = asMap(l)["value"]
	}
	settings := map[string]any{}
	for name, v := range asMap(doc["x-settings"]) {
		m := asMap(v)
		entry := map[string]any{"env": m["env"], "default": fmt.Sprint(m["default"]), "description": m["description"]}
		if a := asSlice(m["aliases"]); len(a) > 0 {
			entry["aliases"] = a
		}
		settings[name] = entry
	}
	defs := map[string]any{}
	for name, s := range asMap(asMap(doc["components"])["schemas"]) {
		defs[name] = toJSONSchema(s)
	}
	constants := map[string]any{}
	for _, c := range tax.Constants {
		var v any
		if err := c.Value.Decode(&v); err != nil {
			return nil, err
		}
		constants[c.Name] = v
	}
	info := asMap(doc["info"])
	out := map[string]any{
		"$schema":              jsonSchemaDialect,
		"$id":                  SchemaID,
		"title":                asString(info["title"]),
		"generated_from":       "api/openapi.yaml and api/errors.yaml, by schema/",
		"protocol_version":     doc["x-protocol-version"],
		"daemon_version":       asString(doc["x-daemon-version"]),
		"version_header":       doc["x-version-header"],
		"version_header_scope": doc["x-version-header-scope"],
		"hook_prefix":          doc["x-hook-prefix"],
		"auth":                 doc["x-auth"],
		"unmatched_path":       doc["x-unmatched-path"],
		"limits":               limits,
		"memory":               doc["x-memory"],
		"frames":               doc["x-frames"],
		"settings":             settings,
		"routes":               rs,
		"$defs":                defs,
		"taxonomy": map[string]any{
			"error_kinds":    tax.ErrorKinds,
			"wire_kinds":     tax.WireKinds,
			"fallback_5xx":   tax.Fallback5xx,
			"exit_codes":     tax.ExitCodes,
			"daemon_errors":  tax.DaemonErrors,
			"findings":       tax.Findings,
			"constants":      constants,
			"regions":        tax.Regions,
			"size_classes":   tax.SizeClasses,
			"microvm_states": tax.MicrovmStates,
			"image_states":   tax.ImageStates,
			"build_states":   tax.BuildStates,
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	wire, err := wireGo(node, doc)
	if err != nil {
		return nil, err
	}
	return []Output{
		{Path: "docs/schema.json", Data: buf.Bytes()},
		{Path: "gen/protocol/wire.gen.go", Data: wire},
	}, nil
}

func init() { register(generateDocument) }
