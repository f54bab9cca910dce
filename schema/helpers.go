package schema

// The helpers every generator shares: strict YAML decoding of api/ files and
// of api/openapi.yaml, Go identifiers from contract names, executing the
// templates under templates/ into a generated file, the Go types and structs
// of contract keys, and reading YAML/JSON values.
//
// A generator's own file holds only what that generator writes: it builds a
// view (plain structs) and its template under templates/ lays the view out,
// executed by renderGo or renderText here. The SDK generator's templates are
// sdktmpl/ and sdkcore/ (see sdk.go).

import (
	"bytes"
	"embed"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// templates are templates/*.tmpl, each named by its file name. The funcs are
// the spellings every generator's templates share.
var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"ident": goIdent,
	"quote": strconv.Quote,
	"float": func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) },
	"constval": func(typ string, n yaml.Node) (string, error) {
		return constValue(typ, n)
	},
}).ParseFS(templateFS, "templates/*.tmpl"))

// renderText executes templates/<name> on data.
func renderText(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return b.String(), nil
}

// renderGo executes templates/<name> on data as the body of a generated Go
// file of package pkg (see goFile), gofmt'd.
func renderGo(pkg, name string, data any) ([]byte, error) {
	body, err := renderText(name, data)
	if err != nil {
		return nil, err
	}
	src := goFile(pkg, body)
	out, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("%s: gofmt: %w\n%s", name, err, src)
	}
	return out, nil
}

// decodeStrict decodes api/<name> into v, refusing keys v does not declare so
// a misspelt key fails generation instead of being silently dropped.
func decodeStrict(root, name string, v any) error {
	raw, err := os.ReadFile(filepath.Join(root, "api", name))
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("api/%s: %w", name, err)
	}
	return nil
}

// initialisms are the words Go writes in one case (as golint and
// oapi-codegen do, plus CLI, OK and USD), when a slug or a JSON key names
// them as a whole word.
var initialisms = map[string]bool{
	"API": true, "ARN": true, "CLI": true, "CPU": true, "EOF": true, "HTTP": true, "ID": true, "IP": true,
	"JSON": true, "OK": true, "PID": true, "PTY": true, "SSE": true, "TLS": true, "TTL": true,
	"UID": true, "GID": true, "URI": true, "URL": true, "USD": true, "UTF8": true, "VM": true,
}

// goIdent turns a slug like "run-hook-payload-ceiling" or "still_running"
// into an exported Go identifier suffix ("RunHookPayloadCeiling").
func goIdent(s string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '_' || r == ' ' }) {
		if up := strings.ToUpper(part); initialisms[up] {
			b.WriteString(up) // Go's initialisms: ExecTTLSecs, not ExecTtlSecs
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func constValue(typ string, n yaml.Node) (string, error) {
	switch typ {
	case "string":
		return strconv.Quote(n.Value), nil
	case "int":
		if _, err := strconv.ParseInt(n.Value, 10, 64); err != nil {
			return "", err
		}
		return n.Value, nil
	}
	return "", fmt.Errorf("unknown type %q", typ)
}

// goFile assembles a generated Go file. A body that opens with a
// "// Package ..." comment block has that block placed above the package
// clause, where go doc reads it as the package comment.
func goFile(pkg, body string) []byte {
	var doc string
	if strings.HasPrefix(body, "// Package ") {
		if end := strings.Index(body, "\n\n"); end >= 0 {
			doc, body = body[:end+1], body[end+2:]
		}
	}
	var b strings.Builder
	b.WriteString(GeneratedHeader)
	b.WriteString("\n")
	b.WriteString(doc)
	b.WriteString("package " + pkg + "\n\n")
	b.WriteString(body)
	return []byte(b.String())
}

// responseIdent turns "microvm.exec.stream" into "ExecStream".
func responseIdent(typ string) string {
	return goIdent(strings.ReplaceAll(strings.TrimPrefix(typ, "microvm."), ".", "_"))
}

// goFieldName turns a JSON key (camelCase, or the ledger's snake_case) into
// an exported Go field name, spelling Go's initialisms in capitals word by
// word: supportsJson -> SupportsJSON, totalUsd -> TotalUSD, image_arn ->
// ImageARN, ok -> OK.
func goFieldName(key string) string {
	var words []string
	for _, part := range strings.Split(key, "_") {
		w := 0
		for i := 1; i <= len(part); i++ {
			if i == len(part) || (part[i] >= 'A' && part[i] <= 'Z') {
				words = append(words, part[w:i])
				w = i
			}
		}
	}
	var b strings.Builder
	for _, word := range words {
		if word == "" {
			continue
		}
		if up := strings.ToUpper(word); initialisms[up] {
			b.WriteString(up)
			continue
		}
		b.WriteString(strings.ToUpper(word[:1]) + word[1:])
	}
	return b.String()
}

// goType is the Go type of a key. A ref is the named shape's generated type
// (a pointer when the key is nullable); an object with no ref (the
// manifest's JSON Schema) or a builtin shape stays any. An optional key, which
// only a shape may hold, is a pointer so that absent (nil) and zero are told
// apart: a ledger record's "closed": false is written, an unreadable one's
// closed is absent.
func goType(k CLIKey) string {
	var t string
	named := k.Ref != "" && !builtinShapes[k.Ref]
	switch k.Type {
	case "string":
		t = "string"
	case "integer":
		t = "int64"
	case "number":
		t = "float64"
	case "boolean":
		t = "bool"
	case "object":
		if !named {
			return "any"
		}
		t = shapeIdent(k.Ref)
	case "array":
		switch {
		case k.Items == "string":
			t = "[]string"
		case k.Items == "integer":
			t = "[]int64"
		case named:
			t = "[]" + shapeIdent(k.Ref)
		default:
			t = "[]any"
		}
		// A nullable array is a nil slice, which encodes as null.
		if k.Optional {
			return "*" + t
		}
		return t
	}
	if k.Nullable || k.Optional {
		return "*" + t
	}
	return t
}

// shapeIdent is the Go type of a shape: costReport -> CostReport.
func shapeIdent(name string) string { return goFieldName(name) }

// goStruct is one generated struct of contract keys, laid out by the
// "struct" template of templates/common.tmpl: its doc line ("// Name Doc"),
// then a field per key in the contract's order, which is the order the JSON
// keys are written in.
type goStruct struct {
	Name, Doc string
	Fields    []goField
}

// goField is one struct field; Doc, when set, is its comment ("Name is Doc").
type goField struct {
	Name, Type, Tag, Doc string
}

// keyField is the field of a contract key whose Go type is typ.
func keyField(k CLIKey, typ, doc string) goField {
	tag := k.Name
	if k.Optional {
		tag += ",omitempty"
	}
	return goField{Name: goFieldName(k.Name), Type: typ, Tag: tag, Doc: doc}
}

// keyStruct is the struct of keys, each field typed by goType.
func keyStruct(name, doc string, keys []CLIKey) goStruct {
	s := goStruct{Name: name, Doc: doc}
	for _, k := range keys {
		s.Fields = append(s.Fields, keyField(k, goType(k), k.Doc))
	}
	return s
}

// asString is v as a string, "" when it is not one.
func asString(v any) string {
	s, _ := v.(string)
	return s
}

// loadOpenAPI decodes api/openapi.yaml twice: as a node tree (for document
// order, which Go maps lose) and as plain values (for conversion).
func loadOpenAPI(root string) (*yaml.Node, map[string]any, error) {
	raw, err := os.ReadFile(filepath.Join(root, "api", "openapi.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return nil, nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	return &node, doc, nil
}

// mappingKeys returns the keys of the mapping at path under n, in document order.
func mappingKeys(n *yaml.Node, path ...string) []string {
	if n.Kind == yaml.DocumentNode {
		n = n.Content[0]
	}
	for _, p := range path {
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == p {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	var keys []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys = append(keys, n.Content[i].Value)
	}
	return keys
}

// asMap is v as a JSON/YAML object, nil when it is not one.
func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// asSlice is v as a JSON/YAML array, nil when it is not one.
func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// refName is the last element of a JSON reference: #/components/schemas/X -> X.
func refName(ref string) string { return ref[strings.LastIndexByte(ref, '/')+1:] }
