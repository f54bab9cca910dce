package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// MCPContract is api/mcp.yaml, decoded: the `microvm mcp` server's name and
// instructions, the limits it enforces, and each tool's arguments and
// structured result.
type MCPContract struct {
	APIVersion string `yaml:"api_version"`
	Server     struct {
		Name         string `yaml:"name"`
		Title        string `yaml:"title"`
		Instructions string `yaml:"instructions"`
	} `yaml:"server"`
	Limits []struct {
		Name  string `yaml:"name"`
		Value int64  `yaml:"value"`
		Doc   string `yaml:"doc"`
	} `yaml:"limits"`
	Shapes map[string][]MCPKey `yaml:"shapes"`
	Tools  []MCPTool           `yaml:"tools"`
}

// MCPTool is one tool: its name, what an agent reads about it, the hints MCP
// clients show, its arguments and its result's keys.
type MCPTool struct {
	Name        string   `yaml:"name"`
	Title       string   `yaml:"title"`
	Doc         string   `yaml:"doc"`
	ReadOnly    bool     `yaml:"read_only"`
	Destructive bool     `yaml:"destructive"`
	Idempotent  bool     `yaml:"idempotent"`
	Args        []MCPKey `yaml:"args"`
	Result      []MCPKey `yaml:"result"`
}

// MCPKey is one JSON key of a tool's arguments or result.
type MCPKey struct {
	Name     string   `yaml:"name"`
	Type     string   `yaml:"type"`
	Items    string   `yaml:"items"`
	Values   string   `yaml:"values"`
	Ref      string   `yaml:"ref"`
	Enum     []string `yaml:"enum"`
	Domain   string   `yaml:"domain"`
	Minimum  *float64 `yaml:"minimum"`
	Maximum  *float64 `yaml:"maximum"`
	Optional bool     `yaml:"optional"`
	Nullable bool     `yaml:"nullable"`
	Doc      string   `yaml:"doc"`
}

// mcpModel is the MCP contract joined with what it refers to: api/cli.yaml's
// shapes and api/errors.yaml's size classes.
type mcpModel struct {
	m      *MCPContract
	cli    *CLIContract
	sizes  []int
	limits map[string]int64
}

var mcpToolName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

func loadMCPModel(root string) (*mcpModel, error) {
	var m MCPContract
	if err := decodeStrict(root, "mcp.yaml", &m); err != nil {
		return nil, err
	}
	c, err := LoadCLIContract(root)
	if err != nil {
		return nil, err
	}
	tax, err := LoadTaxonomy(root)
	if err != nil {
		return nil, err
	}
	mm := &mcpModel{m: &m, cli: c, limits: map[string]int64{}}
	for _, row := range tax.SizeClasses.Rows {
		mm.sizes = append(mm.sizes, row.BaselineMiB)
	}
	if err := mm.check(); err != nil {
		return nil, fmt.Errorf("api/mcp.yaml: %w", err)
	}
	return mm, nil
}

// check refuses what would generate a schema that says less than the YAML
// meant: an unknown type, a dangling ref, a shape name both files use, a
// doc naming a limit that does not exist.
func (mm *mcpModel) check() error {
	m := mm.m
	if m.APIVersion == "" || m.Server.Name == "" {
		return fmt.Errorf("api_version and server.name are required")
	}
	for _, l := range m.Limits {
		if _, dup := mm.limits[l.Name]; dup || l.Value <= 0 {
			return fmt.Errorf("limit %s: declared twice or not positive", l.Name)
		}
		mm.limits[l.Name] = l.Value
	}
	for name := range m.Shapes {
		if mm.cli.Shapes[name] != nil {
			return fmt.Errorf("shape %s is already api/cli.yaml's; ref that one", name)
		}
	}
	checkKeys := func(where string, keys []MCPKey, args bool) error {
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k.Name] {
				return fmt.Errorf("%s.%s twice", where, k.Name)
			}
			seen[k.Name] = true
			switch k.Type {
			case "string", "integer", "number", "boolean":
			case "map":
				if k.Values != "string" {
					return fmt.Errorf("%s.%s: a map's values are string", where, k.Name)
				}
			case "array":
				if k.Items != "string" && !(k.Items == "object" && k.Ref != "") {
					return fmt.Errorf("%s.%s: array items are string, or object with a ref", where, k.Name)
				}
			case "object":
				if k.Ref == "" {
					return fmt.Errorf("%s.%s: an object names its shape by ref", where, k.Name)
				}
			default:
				return fmt.Errorf("%s.%s: unknown type %q", where, k.Name, k.Type)
			}
			if k.Ref != "" && m.Shapes[k.Ref] == nil && mm.cli.Shapes[k.Ref] == nil {
				return fmt.Errorf("%s.%s: ref %q names no shape here or in api/cli.yaml", where, k.Name, k.Ref)
			}
			if len(k.Enum) > 0 && k.Type != "string" {
				return fmt.Errorf("%s.%s: enum on a %s", where, k.Name, k.Type)
			}
			if k.Domain != "" && (k.Domain != "size_class" || k.Type != "integer") {
				return fmt.Errorf("%s.%s: the one domain is size_class, on an integer", where, k.Name)
			}
			if args && k.Nullable {
				return fmt.Errorf("%s.%s: an argument is optional, never nullable", where, k.Name)
			}
			if !args && k.Optional {
				return fmt.Errorf("%s.%s: a result key is always present (nullable if need be)", where, k.Name)
			}
			if err := mm.checkDoc(where+"."+k.Name, k.Doc); err != nil {
				return err
			}
		}
		return nil
	}
	for name, keys := range m.Shapes {
		if err := checkKeys("shape "+name, keys, false); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, t := range m.Tools {
		if !mcpToolName.MatchString(t.Name) || seen[t.Name] {
			return fmt.Errorf("tool %q: a lower_snake name, once", t.Name)
		}
		seen[t.Name] = true
		if t.Doc == "" || t.Title == "" {
			return fmt.Errorf("tool %s: title and doc are what an agent reads; both are required", t.Name)
		}
		if t.ReadOnly && t.Destructive {
			return fmt.Errorf("tool %s: read_only and destructive", t.Name)
		}
		if err := mm.checkDoc(t.Name, t.Doc); err != nil {
			return err
		}
		if err := checkKeys(t.Name+" args", t.Args, true); err != nil {
			return err
		}
		if len(t.Result) == 0 {
			return fmt.Errorf("tool %s: a structured result needs keys", t.Name)
		}
		if err := checkKeys(t.Name+" result", t.Result, false); err != nil {
			return err
		}
	}
	return nil
}

var limitRef = regexp.MustCompile(`\{([a-z_]+)\}`)

// checkDoc refuses a {placeholder} that names no limit.
func (mm *mcpModel) checkDoc(where, doc string) error {
	for _, sub := range limitRef.FindAllStringSubmatch(doc, -1) {
		if _, ok := mm.limits[sub[1]]; !ok {
			return fmt.Errorf("%s: {%s} names no limit", where, sub[1])
		}
	}
	return nil
}

// text is a doc with each {limit} replaced by its value, so an agent reads
// the number the server enforces.
func (mm *mcpModel) text(doc string) string {
	return strings.TrimSpace(limitRef.ReplaceAllStringFunc(doc, func(s string) string {
		return strconv.FormatInt(mm.limits[s[1:len(s)-1]], 10)
	}))
}

// keySchema is one key's JSON Schema (2020-12), shapes inlined so a client
// reads each tool's schema whole.
func (mm *mcpModel) keySchema(k MCPKey) map[string]any {
	s := map[string]any{}
	switch k.Type {
	case "map":
		s["type"] = "object"
		s["additionalProperties"] = map[string]any{"type": "string"}
	case "array":
		s["type"] = "array"
		if k.Ref != "" {
			s["items"] = mm.shapeSchema(k.Ref)
		} else {
			s["items"] = map[string]any{"type": k.Items}
		}
	case "object":
		s = mm.shapeSchema(k.Ref)
	default:
		s["type"] = k.Type
	}
	if k.Nullable {
		s["type"] = []any{s["type"], "null"}
	}
	if len(k.Enum) > 0 {
		enum := []any{}
		for _, e := range k.Enum {
			enum = append(enum, e)
		}
		s["enum"] = enum
	}
	if k.Domain == "size_class" {
		enum := []any{}
		for _, v := range mm.sizes {
			enum = append(enum, v)
		}
		s["enum"] = enum
	}
	if k.Minimum != nil {
		s["minimum"] = *k.Minimum
	}
	if k.Maximum != nil {
		s["maximum"] = *k.Maximum
	}
	if k.Doc != "" {
		s["description"] = mm.text(k.Doc)
	}
	return s
}

// shapeSchema is a closed object of a named shape, this file's or api/cli.yaml's.
func (mm *mcpModel) shapeSchema(name string) map[string]any {
	if keys, ok := mm.m.Shapes[name]; ok {
		return mm.objectSchema(keys)
	}
	// api/cli.yaml's shape, in that file's own vocabulary, with the shapes
	// it refers to inlined: a tool's schema has no $defs to point into.
	return mm.inlineCLIRefs(objectSchema("", mm.cli.Shapes[name]))
}

// inlineCLIRefs replaces each {"$ref": "#/$defs/shape:NAME"} under v with
// api/cli.yaml's shape NAME (its own refs inlined too; the shapes nest
// without cycles), keeping the ref's sibling keys.
func (mm *mcpModel) inlineCLIRefs(v map[string]any) map[string]any {
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			if ref, ok := t["$ref"].(string); ok {
				if name, ok := strings.CutPrefix(ref, "#/$defs/shape:"); ok && mm.cli.Shapes[name] != nil {
					in := mm.inlineCLIRefs(objectSchema("", mm.cli.Shapes[name]))
					for k, sub := range t {
						if k != "$ref" {
							in[k] = walk(sub)
						}
					}
					return in
				}
			}
			for k, sub := range t {
				t[k] = walk(sub)
			}
			return t
		case []any:
			for i, sub := range t {
				t[i] = walk(sub)
			}
			return t
		}
		return x
	}
	return walk(v).(map[string]any)
}

// objectSchema is a closed object: every key required unless optional.
func (mm *mcpModel) objectSchema(keys []MCPKey) map[string]any {
	props := map[string]any{}
	req := []string{}
	for _, k := range keys {
		props[k.Name] = mm.keySchema(k)
		if !k.Optional {
			req = append(req, k.Name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
}

// mcpTool is one entry of docs/mcp-tools.json: what tools/list answers.
type mcpTool struct {
	Name         string         `json:"name"`
	Title        string         `json:"title"`
	Description  string         `json:"description"`
	InputSchema  map[string]any `json:"inputSchema"`
	OutputSchema map[string]any `json:"outputSchema"`
	Annotations  mcpAnnotations `json:"annotations"`
}

type mcpAnnotations struct {
	Title           string `json:"title"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint bool   `json:"destructiveHint"`
	IdempotentHint  bool   `json:"idempotentHint"`
	OpenWorldHint   bool   `json:"openWorldHint"`
}

func (mm *mcpModel) tools() []mcpTool {
	var out []mcpTool
	for _, t := range mm.m.Tools {
		out = append(out, mcpTool{
			Name: t.Name, Title: t.Title, Description: mm.text(t.Doc),
			InputSchema:  mm.objectSchema(t.Args),
			OutputSchema: mm.objectSchema(t.Result),
			// A sandbox is a closed world of its own: no tool reaches
			// anything outside it on the caller's behalf.
			Annotations: mcpAnnotations{Title: t.Title, ReadOnlyHint: t.ReadOnly, DestructiveHint: t.Destructive, IdempotentHint: t.Idempotent},
		})
	}
	return out
}

// mcpGoType is a key's Go type in gen/mcpapi.
func (mm *mcpModel) goType(k MCPKey) string {
	var t string
	switch k.Type {
	case "string":
		t = "string"
	case "integer":
		t = "int64"
	case "number":
		t = "float64"
	case "boolean":
		t = "bool"
	case "map":
		return "map[string]string"
	case "array":
		if k.Ref != "" {
			return "[]" + mm.shapeType(k.Ref)
		}
		return "[]string"
	case "object":
		t = mm.shapeType(k.Ref)
	}
	if k.Nullable {
		return "*" + t
	}
	return t
}

// shapeType is a shape's Go type: this file's in gen/mcpapi, api/cli.yaml's
// in gen/cliapi, so a directory entry is one type in both.
func (mm *mcpModel) shapeType(name string) string {
	if _, ok := mm.m.Shapes[name]; ok {
		return shapeIdent(name)
	}
	return "cliapi." + shapeIdent(name)
}

// keyStruct is the struct of keys, each field typed by mm.goType.
func (mm *mcpModel) keyStruct(name, doc string, keys []MCPKey) goStruct {
	s := goStruct{Name: name, Doc: doc}
	for _, k := range keys {
		tag := k.Name
		if k.Optional {
			tag += ",omitempty"
		}
		f := goField{Name: goFieldName(k.Name), Type: mm.goType(k), Tag: tag}
		if k.Doc != "" {
			f.Doc = mm.text(k.Doc)
		}
		s.Fields = append(s.Fields, f)
	}
	return s
}

// mcpToolView is one entry of gen/mcpapi's Tools table.
type mcpToolView struct {
	Name, Title, Description          string
	ReadOnly, Destructive, Idempotent bool
	InputSchema, OutputSchema         string // JSON
}

// goSource is gen/mcpapi/mcpapi.gen.go, laid out by templates/mcpapi.go.tmpl.
func (mm *mcpModel) goSource(tools []mcpTool) ([]byte, error) {
	type limit struct {
		Ident, Doc string
		Value      any
	}
	type ident struct{ Ident, Value string }
	view := struct {
		APIVersion, ServerName, ServerTitle, ServerInstructions string
		UsesCLI                                                 bool
		Limits                                                  []limit
		ToolNames                                               []ident
		Structs                                                 []goStruct
		Tools                                                   []mcpToolView
	}{
		APIVersion:         mm.m.APIVersion,
		ServerName:         mm.m.Server.Name,
		ServerTitle:        mm.m.Server.Title,
		ServerInstructions: mm.text(mm.m.Server.Instructions),
		UsesCLI:            mm.usesCLI(),
	}
	for _, l := range mm.m.Limits {
		view.Limits = append(view.Limits, limit{goIdent(l.Name), l.Doc, l.Value})
	}
	for _, t := range mm.m.Tools {
		view.ToolNames = append(view.ToolNames, ident{goIdent(t.Name), t.Name})
	}
	names := make([]string, 0, len(mm.m.Shapes))
	for n := range mm.m.Shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		view.Structs = append(view.Structs, mm.keyStruct(shapeIdent(n), fmt.Sprintf("is the %q shape of api/mcp.yaml.", n), mm.m.Shapes[n]))
	}
	for _, t := range mm.m.Tools {
		view.Structs = append(view.Structs,
			mm.keyStruct(goIdent(t.Name)+"Args", fmt.Sprintf("are the arguments of %s.", t.Name), t.Args),
			mm.keyStruct(goIdent(t.Name)+"Result", fmt.Sprintf("is the structured result of %s.", t.Name), t.Result))
	}
	for i, t := range tools {
		in, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, err
		}
		out, err := json.Marshal(t.OutputSchema)
		if err != nil {
			return nil, err
		}
		d := mm.m.Tools[i]
		view.Tools = append(view.Tools, mcpToolView{Name: t.Name, Title: t.Title, Description: t.Description,
			ReadOnly: d.ReadOnly, Destructive: d.Destructive, Idempotent: d.Idempotent,
			InputSchema: string(in), OutputSchema: string(out)})
	}
	return renderGo("mcpapi", "mcpapi.go.tmpl", view)
}

// usesCLI says a key refers to one of gen/cliapi's shapes, so gen/mcpapi
// imports it.
func (mm *mcpModel) usesCLI() bool {
	for _, t := range mm.m.Tools {
		for _, k := range append(append([]MCPKey(nil), t.Args...), t.Result...) {
			if k.Ref != "" && mm.m.Shapes[k.Ref] == nil {
				return true
			}
		}
	}
	return false
}

func generateMCP(root string) ([]Output, error) {
	mm, err := loadMCPModel(root)
	if err != nil {
		return nil, err
	}
	tools := mm.tools()
	goSrc, err := mm.goSource(tools)
	if err != nil {
		return nil, err
	}
	var doc bytes.Buffer
	enc := json.NewEncoder(&doc)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"apiVersion": mm.m.APIVersion, "server": mm.m.Server.Name, "tools": tools}); err != nil {
		return nil, err
	}
	return []Output{
		{Path: "gen/mcpapi/mcpapi.gen.go", Data: goSrc},
		{Path: "docs/mcp-tools.json", Data: doc.Bytes()},
	}, nil
}

func init() { register(generateMCP) }
