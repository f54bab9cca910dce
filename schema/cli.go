package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// CLIContract is api/cli.yaml, decoded: the CLI's envelope, its response
// types and their data keys, the NDJSON lines of `exec --stream`, and the
// conventions the manifest publishes.
type CLIContract struct {
	APIVersion string `yaml:"api_version"`
	Envelope   struct {
		Success CLIShape `yaml:"success"`
		Failure CLIShape `yaml:"failure"`
	} `yaml:"envelope"`
	Conventions []string      `yaml:"conventions"`
	Responses   []CLIResponse `yaml:"responses"`
	Commands    []struct {
		Name  string `yaml:"name"`
		Type  string `yaml:"type"`
		Ready bool   `yaml:"ready"`
	} `yaml:"commands"`
	Alternates []struct {
		Command string `yaml:"command"`
		When    string `yaml:"when"`
		Type    string `yaml:"type"`
		Stdout  string `yaml:"stdout"`
	} `yaml:"alternates"`
	StreamEvents []struct {
		Event string   `yaml:"event"`
		Keys  []CLIKey `yaml:"keys"`
	} `yaml:"stream_events"`
	// Shapes are named closed objects a key may take by `ref`, so a shape
	// used twice (a cost report inside a comparison) is declared once.
	Shapes map[string][]CLIKey `yaml:"shapes"`
}

// builtinShapes are the shapes the generator derives from api/errors.yaml
// rather than from this file, so a constant is declared in one place.
var builtinShapes = map[string]bool{"constants": true}

// CLIShape is one envelope shape: its doc line and its keys, all required.
type CLIShape struct {
	Doc  string   `yaml:"doc"`
	Keys []CLIKey `yaml:"keys"`
}

// CLIResponse is one success `type` and the data keys it always carries.
type CLIResponse struct {
	Type string   `yaml:"type"`
	Keys []CLIKey `yaml:"keys"`
}

// CLIKey is one JSON key: its type, whether it may be null, and for arrays
// the type of the items. Every declared key is always present.
type CLIKey struct {
	Name     string `yaml:"name"`
	Type     string `yaml:"type"`
	Items    string `yaml:"items"`
	Nullable bool   `yaml:"nullable"`
	Const    string `yaml:"const"`
	Doc      string `yaml:"doc"`
	// Enum closes a string key to these values.
	Enum []string `yaml:"enum"`
	// Keys is refused on a key: an object's keys are a named shape, by Ref,
	// so its generated Go type has a name. Decoded only to say so.
	Keys []CLIKey `yaml:"keys"`
	// Ref names a shape: the object's (or an array's object items') closed
	// keys and its Go type.
	Ref string `yaml:"ref"`
	// Optional is allowed only inside a shape, for a key the reference's own
	// JSON omits (a cost line's usd when the line is unpriced).
	Optional bool `yaml:"optional"`
}

// LoadCLIContract reads and checks api/cli.yaml under root.
func LoadCLIContract(root string) (*CLIContract, error) {
	var c CLIContract
	if err := decodeStrict(root, "cli.yaml", &c); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("api/cli.yaml: %w", err)
	}
	return &c, nil
}

// check refuses dangling references and unknown key types, so a typo in the
// YAML fails generation instead of producing a schema that accepts anything.
func (c *CLIContract) check() error {
	if c.APIVersion == "" {
		return fmt.Errorf("api_version is required")
	}
	checkNested := func(where string, keys []CLIKey, nested bool) error {
		for _, k := range keys {
			if k.Optional && !nested {
				return fmt.Errorf("%s.%s: only a key inside a shape may be optional", where, k.Name)
			}
			if len(k.Enum) > 0 && k.Type != "string" {
				return fmt.Errorf("%s.%s: enum on a %s", where, k.Name, k.Type)
			}
			if len(k.Keys) > 0 {
				// One shape, one name: gen/cliapi would otherwise need an
				// anonymous struct, which a command cannot name to fill.
				return fmt.Errorf("%s.%s: an object's keys listed inline; declare them as a shape under shapes: and ref it", where, k.Name)
			}
			object := k.Type == "object" || (k.Type == "array" && k.Items == "object")
			if k.Ref != "" && !object {
				return fmt.Errorf("%s.%s: ref on a key that holds no object", where, k.Name)
			}
			if k.Ref != "" && c.Shapes[k.Ref] == nil && !builtinShapes[k.Ref] {
				return fmt.Errorf("%s.%s: ref %q names no shape", where, k.Name, k.Ref)
			}
		}
		return nil
	}
	checkKeys := func(where string, keys []CLIKey, _ bool) error {
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k.Name] {
				return fmt.Errorf("%s: key %q twice", where, k.Name)
			}
			seen[k.Name] = true
			switch k.Type {
			case "string", "integer", "number", "boolean", "object":
				if k.Items != "" {
					return fmt.Errorf("%s.%s: items on a non-array", where, k.Name)
				}
			case "array":
				switch k.Items {
				case "string", "integer", "object":
				default:
					return fmt.Errorf("%s.%s: array items %q", where, k.Name, k.Items)
				}
			default:
				return fmt.Errorf("%s.%s: unknown type %q", where, k.Name, k.Type)
			}
		}
		return nil
	}
	for name, keys := range c.Shapes {
		if builtinShapes[name] {
			return fmt.Errorf("shape %q is generated from api/errors.yaml", name)
		}
		if err := checkKeys("shape "+name, keys, false); err != nil {
			return err
		}
		if err := checkNested("shape "+name, keys, true); err != nil {
			return err
		}
	}
	if err := checkKeys("envelope.success", c.Envelope.Success.Keys, false); err != nil {
		return err
	}
	if err := checkKeys("envelope.failure", c.Envelope.Failure.Keys, false); err != nil {
		return err
	}
	types := map[string]bool{}
	for _, r := range c.Responses {
		if types[r.Type] {
			return fmt.Errorf("response %q declared twice", r.Type)
		}
		if !strings.HasPrefix(r.Type, "microvm.") {
			return fmt.Errorf("response %q is not namespaced under microvm", r.Type)
		}
		types[r.Type] = true
		if err := checkKeys(r.Type, r.Keys, false); err != nil {
			return err
		}
		if err := checkNested(r.Type, r.Keys, false); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	for _, cmd := range c.Commands {
		if names[cmd.Name] {
			return fmt.Errorf("command %q declared twice", cmd.Name)
		}
		names[cmd.Name] = true
		if !types[cmd.Type] {
			return fmt.Errorf("command %s names unknown response %q", cmd.Name, cmd.Type)
		}
	}
	for _, a := range c.Alternates {
		if !names[a.Command] || !types[a.Type] {
			return fmt.Errorf("alternate %s/%s points nowhere", a.Command, a.Type)
		}
	}
	for _, e := range c.StreamEvents {
		if err := checkKeys("stream event "+e.Event, e.Keys, false); err != nil {
			return err
		}
		if err := checkNested("stream event "+e.Event, e.Keys, false); err != nil {
			return err
		}
	}
	return nil
}

func generateCLI(root string) ([]Output, error) {
	c, err := LoadCLIContract(root)
	if err != nil {
		return nil, err
	}
	tax, err := LoadTaxonomy(root)
	if err != nil {
		return nil, err
	}
	goSrc, err := cliGo(c, tax)
	if err != nil {
		return nil, err
	}
	schemaJSON, err := cliSchema(c, tax)
	if err != nil {
		return nil, err
	}
	// The schema is also compiled into the CLI, so `microvm manifest` publishes
	// the very bytes docs/ holds rather than a copy that could drift.
	embedded, err := renderGo("cliapi", "cliapi_schema.go.tmpl", string(schemaJSON))
	if err != nil {
		return nil, err
	}
	return []Output{
		{Path: "gen/cliapi/cliapi.gen.go", Data: goSrc},
		{Path: "gen/cliapi/schema.gen.go", Data: embedded},
		{Path: "docs/envelope.schema.json", Data: schemaJSON},
	}, nil
}

// cliGo is gen/cliapi/cliapi.gen.go, laid out by templates/cliapi.go.tmpl.
func cliGo(c *CLIContract, tax *Taxonomy) ([]byte, error) {
	type ident struct{ Ident, Value string }
	var view struct {
		APIVersion            string
		Types, Events         []ident
		Structs, EventStructs []goStruct
		Responses             []CLIResponse
		Commands, Alternates  any
		Conventions           []string
		Constants             any
	}
	view.APIVersion = c.APIVersion
	view.Responses = c.Responses
	view.Commands, view.Alternates = c.Commands, c.Alternates
	view.Conventions = c.Conventions
	view.Constants = tax.Constants
	view.Structs = append(view.Structs,
		keyStruct("Success", "is the envelope of a command that did what it said.", c.Envelope.Success.Keys),
		keyStruct("Failure", "is the envelope of a failed command; every key is always present.", c.Envelope.Failure.Keys))
	for _, r := range c.Responses {
		view.Types = append(view.Types, ident{responseIdent(r.Type), r.Type})
		view.Structs = append(view.Structs, keyStruct(responseIdent(r.Type)+"Data", fmt.Sprintf("is the data of a %s envelope.", r.Type), r.Keys))
	}
	// The shapes as Go types, so a command fills a typed value rather than
	// spelling the keys of a map a second time.
	shapeNames := make([]string, 0, len(c.Shapes))
	for name := range c.Shapes {
		shapeNames = append(shapeNames, name)
	}
	sort.Strings(shapeNames)
	for _, name := range shapeNames {
		view.Structs = append(view.Structs, keyStruct(shapeIdent(name), fmt.Sprintf("is the %q shape of api/cli.yaml.", name), c.Shapes[name]))
	}
	for _, e := range c.StreamEvents {
		view.Events = append(view.Events, ident{goIdent(e.Event), e.Event})
		s := keyStruct("Stream"+goIdent(e.Event)+"Line", fmt.Sprintf("is one %q line of exec --stream.", e.Event), e.Keys)
		s.Fields = append([]goField{{Name: "Event", Type: "string", Tag: "event"}}, s.Fields...)
		view.EventStructs = append(view.EventStructs, s)
	}
	return renderGo("cliapi", "cliapi.go.tmpl", view)
}

func keySchema(k CLIKey) map[string]any {
	s := map[string]any{}
	if k.Doc != "" {
		s["description"] = k.Doc
	}
	if k.Const != "" {
		s["const"] = k.Const
	}
	if len(k.Enum) > 0 {
		enum := []any{}
		for _, e := range k.Enum {
			enum = append(enum, e)
		}
		if k.Nullable {
			enum = append(enum, nil)
		}
		s["enum"] = enum
	}
	// An object's closed shape: a named shape by $ref.
	var shape map[string]any
	if k.Ref != "" {
		shape = map[string]any{"$ref": "#/$defs/shape:" + k.Ref}
	}
	if k.Type == "array" {
		if shape != nil {
			s["items"] = shape
		} else {
			s["items"] = map[string]any{"type": k.Items}
		}
	}
	if k.Nullable {
		s["type"] = []string{k.Type, "null"}
	} else {
		s["type"] = k.Type
	}
	if k.Type == "object" && shape != nil {
		if k.Nullable {
			// null, or the closed shape.
			return map[string]any{"description": k.Doc, "anyOf": []any{map[string]any{"type": "null"}, shape}}
		}
		if k.Doc != "" {
			shape = map[string]any{"description": k.Doc, "allOf": []any{shape}}
		}
		return shape
	}
	return s
}

// objectSchema is a closed object: every key required unless a shape marks
// it optional, no other key allowed, so a key added to a command without its
// YAML line fails the schema tests rather than shipping undescribed.
func objectSchema(doc string, keys []CLIKey) map[string]any {
	props := map[string]any{}
	req := []string{}
	for _, k := range keys {
		props[k.Name] = keySchema(k)
		if !k.Optional {
			req = append(req, k.Name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
	if doc != "" {
		s["description"] = doc
	}
	return s
}

func cliSchema(c *CLIContract, t *Taxonomy) ([]byte, error) {
	defs := map[string]any{}
	for name, keys := range c.Shapes {
		defs["shape:"+name] = objectSchema("", keys)
	}
	defs["shape:constants"] = constantsSchema(t)

	success := objectSchema(c.Envelope.Success.Doc, c.Envelope.Success.Keys)
	sp := success["properties"].(map[string]any)
	sp["apiVersion"].(map[string]any)["const"] = c.APIVersion
	var types []string
	var branches []any
	for _, r := range c.Responses {
		types = append(types, r.Type)
		defs["data:"+r.Type] = objectSchema("", r.Keys)
		branches = append(branches, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"const": r.Type}}, "required": []string{"type"}},
			"then": map[string]any{"properties": map[string]any{"data": map[string]any{"$ref": "#/$defs/data:" + r.Type}}},
		})
	}
	sp["type"].(map[string]any)["enum"] = types
	success["allOf"] = branches
	defs["success"] = success

	failure := objectSchema(c.Envelope.Failure.Doc, c.Envelope.Failure.Keys)
	fp := failure["properties"].(map[string]any)
	fp["apiVersion"].(map[string]any)["const"] = c.APIVersion
	// The code/exit pairs come from the exit table itself, so an envelope
	// whose exitCode disagrees with its code fails validation.
	var codes []string
	var exits []int
	var rows []any
	for _, row := range t.ExitCodes {
		if row.Code == "" {
			continue // row 0 is success, which has no failure envelope
		}
		codes = append(codes, row.Code)
		exits = append(exits, row.Value)
		rows = append(rows, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"code": map[string]any{"const": row.Code}}, "required": []string{"code"}},
			"then": map[string]any{"properties": map[string]any{"exitCode": map[string]any{"const": row.Value}}},
		})
	}
	fp["code"].(map[string]any)["enum"] = codes
	fp["exitCode"].(map[string]any)["enum"] = exits
	findings, slugs := []string{""}, []string{""}
	for _, f := range t.Findings {
		findings = append(findings, f.Title)
		slugs = append(slugs, f.ID)
	}
	fp["finding"].(map[string]any)["enum"] = findings
	fp["findingSlug"].(map[string]any)["enum"] = slugs
	var wires []string
	for _, w := range t.WireKinds {
		wires = append(wires, w.Name)
	}
	fp["data"].(map[string]any)["properties"] = map[string]any{
		"kind": map[string]any{"type": "string", "enum": wires, "description": "the wire kind the daemon's answer was classified into"},
	}
	failure["allOf"] = rows
	defs["failure"] = failure

	var events []any
	var eventNames []string
	for _, e := range c.StreamEvents {
		keys := append([]CLIKey{{Name: "event", Type: "string", Const: e.Event}}, e.Keys...)
		defs["event:"+e.Event] = objectSchema("", keys)
		events = append(events, map[string]any{"$ref": "#/$defs/event:" + e.Event})
		eventNames = append(eventNames, e.Event)
	}
	defs["streamEvent"] = map[string]any{
		"description": "one NDJSON line of exec --stream before its final envelope; `event` is the discriminant (" + strings.Join(eventNames, ", ") + ")",
		"oneOf":       events,
	}

	doc := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://github.com/microvms/microvms/docs/envelope.schema.json",
		"title":       "microvm CLI envelope",
		"description": "The one JSON object `microvm --json` writes on stdout per invocation. Generated from api/cli.yaml and api/errors.yaml; do not edit.",
		"oneOf":       []any{map[string]any{"$ref": "#/$defs/success"}, map[string]any{"$ref": "#/$defs/failure"}},
		"$defs":       defs,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// constantsSchema is the closed shape of `microvm constants`: every service
// constant under its key with its type, and the tables the CLI publishes
// beside them, so a wrongly typed value fails validation.
func constantsSchema(t *Taxonomy) map[string]any {
	props := map[string]any{}
	req := []string{}
	add := func(key string, s map[string]any) {
		props[key] = s
		req = append(req, key)
	}
	for _, k := range t.Constants {
		typ := "string"
		if k.Type == "int" {
			typ = "integer"
		}
		add(k.Key, map[string]any{"type": typ, "description": k.Doc})
	}
	strs := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	for _, key := range ConstantTables {
		add(key, strs)
	}
	add("DEFAULT_BASELINE_MIB", map[string]any{"type": "integer"})
	sizeKeys := []string{"baseline_mib", "baseline_vcpu", "peak_mib", "peak_vcpu"}
	sizeProps := map[string]any{}
	for _, k := range sizeKeys {
		sizeProps[k] = map[string]any{"type": "number"}
	}
	add("SIZE_CLASSES", map[string]any{"type": "array", "items": map[string]any{
		"type": "object", "properties": sizeProps, "required": sizeKeys, "additionalProperties": false}})
	sort.Strings(req)
	return map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
}

// ConstantTables are the keys of the string lists `microvm constants`
// publishes beside the scalar constants, each from a table of api/errors.yaml.
var ConstantTables = []string{
	"MICROVM_REGIONS", "MICROVM_STATES", "TERMINAL_STATES", "DEAD_STATES",
	"IMAGE_STATES", "MODEL_IMAGE_READY_STATES", "BUILD_STATES", "ARCHITECTURES",
}

func init() { register(generateCLI) }
