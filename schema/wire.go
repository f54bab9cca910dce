package schema

import (
	"bytes"
	"fmt"
	"go/format"
	"sort"
	"strconv"
	"text/template"
)

type limitRow struct {
	Ident, Name, Env, Description, Value string
	IsFloat                              bool
}

type eventRow struct{ Ident, Name, Schema string }

var wireTemplate = template.Must(template.New("wire").Funcs(template.FuncMap{"quote": strconv.Quote}).Parse(`// Constants of agentd protocol v1 that are not types: the version header, the
// hook prefix, the SSE event names and the operative limits, from the x-
// extensions of api/openapi.yaml.

// ProtocolVersion is the wire protocol version this package describes.
const ProtocolVersion = {{quote .ProtocolVersion}}

// VersionHeader is the response header every agentd answer carries.
const VersionHeader = {{quote .VersionHeader}}

// HookPrefix is the fixed path prefix of the platform's lifecycle hooks.
const HookPrefix = {{quote .HookPrefix}}

// SSE event names of GET /v1/exec/{id}/stream.
const (
{{- range .Events}}
	Event{{.Ident}} = {{quote .Name}} // payload: {{.Schema}}
{{- end}}
)

// SSETerminalEvent is the event after which the stream body ends.
const SSETerminalEvent = {{quote .Terminal}}

// Limit is one operative limit: its wire name (the key in docs/schema.json),
// the environment variable that overrides it, and its default.
type Limit struct {
	Name        string
	Env         string
	Default     float64
	Description string
}

// Default values of the operative limits.
const (
{{- range .Limits}}
	Default{{.Ident}} = {{.Value}} // {{.Env}}
{{- end}}
)

// Limits lists every operative limit, sorted by name.
var Limits = []Limit{
{{- range .Limits}}
	{Name: {{quote .Name}}, Env: {{quote .Env}}, Default: Default{{.Ident}}, Description: {{quote .Description}}},
{{- end}}
}
`))

func wireGo(doc map[string]any) ([]byte, error) {
	data := struct {
		ProtocolVersion, VersionHeader, HookPrefix, Terminal string
		Events                                               []eventRow
		Limits                                               []limitRow
	}{
		ProtocolVersion: fmt.Sprint(doc["x-protocol-version"]),
		VersionHeader:   asString(doc["x-version-header"]),
		HookPrefix:      asString(doc["x-hook-prefix"]),
	}
	for _, item := range asMap(doc["paths"]) {
		for _, op := range asMap(item) {
			sse := asMap(asMap(op)["x-sse"])
			if sse == nil {
				continue
			}
			data.Terminal = asString(sse["terminal"])
			for _, e := range sse["events"].([]any) {
				em := asMap(e)
				name := asString(em["event"])
				ref := asString(asMap(em["schema"])["$ref"])
				data.Events = append(data.Events, eventRow{Ident: goIdent(name), Name: name, Schema: ref})
			}
		}
	}
	for name, l := range asMap(doc["x-limits"]) {
		lm := asMap(l)
		row := limitRow{Ident: goIdent(name), Name: name, Env: asString(lm["env"]), Description: asString(lm["description"])}
		switch v := lm["value"].(type) {
		case int:
			row.Value = strconv.Itoa(v)
		case float64:
			row.Value = strconv.FormatFloat(v, 'f', -1, 64)
			row.IsFloat = true
		default:
			return nil, fmt.Errorf("x-limits.%s: value %v is not a number", name, v)
		}
		data.Limits = append(data.Limits, row)
	}
	sort.Slice(data.Limits, func(i, j int) bool { return data.Limits[i].Name < data.Limits[j].Name })
	var buf bytes.Buffer
	if err := wireTemplate.Execute(&buf, data); err != nil {
		return nil, err
	}
	src := goFile("protocol", buf.String())
	out, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("wire.gen.go: gofmt: %w", err)
	}
	return out, nil
}
