package schema

import (
	"bytes"
	"embed"
	"fmt"
	"path"
	"strings"
	"text/template"
)

// The Lambda MicroVMs SDK: a service client package shaped like an
// aws-sdk-go-v2 service package, generated from api/lambda-microvms.yaml into
// SDKDir. Files written here are named as aws-sdk-go-v2 names them
// (api_client.go, api_op_<Operation>.go, serializers.go, deserializers.go,
// validators.go, endpoints.go, types/); hand-written code beside them lives in
// handwritten_*.go and customizations_*.go, which this generator never writes.
//
// How it is laid out: sdkmodel.go reads the API into an sdkModel; each
// generated file then has a view (plain structs) built by one function here
// or in sdk_ops.go, sdk_serde.go, sdk_validators.go or traps.go, and a
// template of the same name in sdktmpl/ that lays the view out as Go.
// sdktmpl/common.tmpl holds the layouts every file shares (comments, struct
// fields). The static runtime is sdkcore/*.go.tmpl, executed on the model.

// SDKDir is the generated service package's directory.
const SDKDir = "client/lambdamicrovms"

//go:embed sdkcore/*.go.tmpl
var sdkCore embed.FS

//go:embed sdktmpl/*.tmpl
var sdkTmplFS embed.FS

// sdkTemplates are the per-file templates of sdktmpl/, named by file name.
var sdkTemplates = template.Must(template.ParseFS(sdkTmplFS, "sdktmpl/*.tmpl"))

func init() { register(generateSDK) }

func generateSDK(root string) ([]Output, error) {
	m, err := loadSDKModel(root)
	if err != nil {
		return nil, err
	}
	var outs []Output
	add := func(name, pkg, body string) error {
		src := goFile(pkg, body)
		out, err := pruneImports(src)
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, numbered(src))
		}
		outs = append(outs, Output{Path: path.Join(SDKDir, name), Data: out})
		return nil
	}
	render := func(name, pkg, tmpl string, view any) error {
		var b bytes.Buffer
		if err := sdkTemplates.ExecuteTemplate(&b, tmpl, view); err != nil {
			return fmt.Errorf("%s: %w", tmpl, err)
		}
		return add(name, pkg, b.String())
	}
	// The static runtime: client, options, endpoints, signing, protocol helpers.
	entries, err := sdkCore.ReadDir("sdkcore")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		raw, err := sdkCore.ReadFile("sdkcore/" + e.Name())
		if err != nil {
			return nil, err
		}
		t, err := template.New(e.Name()).Delims("[[", "]]").Parse(string(raw))
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, m); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		name := strings.TrimSuffix(e.Name(), ".tmpl")
		if err := add(name, "lambdamicrovms", b.String()); err != nil {
			return nil, err
		}
	}
	for _, op := range m.Ops {
		if err := render("api_op_"+op.Name+".go", "lambdamicrovms", "api_op.go.tmpl", opView(m, op)); err != nil {
			return nil, err
		}
	}
	traps, err := trapsSource(root, m)
	if err != nil {
		return nil, err
	}
	if err := add("traps.go", "lambdamicrovms", traps); err != nil {
		return nil, err
	}
	files := []struct {
		name, pkg, tmpl string
		view            any
	}{
		{"serializers.go", "lambdamicrovms", "serializers.go.tmpl", serializersView(m)},
		{"deserializers.go", "lambdamicrovms", "deserializers.go.tmpl", deserializersView(m)},
		{"validators.go", "lambdamicrovms", "validators.go.tmpl", validatorsView(m)},
		{"types/types.go", "types", "types.go.tmpl", typesView(m)},
		{"types/enums.go", "types", "enums.go.tmpl", enumsView(m)},
		{"types/errors.go", "types", "errors.go.tmpl", errorsView(m)},
	}
	for _, f := range files {
		if err := render(f.name, f.pkg, f.tmpl, f.view); err != nil {
			return nil, err
		}
	}
	return outs, nil
}

func numbered(src []byte) string {
	var b strings.Builder
	for i, l := range strings.Split(string(src), "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}

// commentLines wraps doc near 80 columns into the lines of a Go comment
// block (without the "// "); an empty line separates paragraphs.
func commentLines(doc string) []string {
	var lines []string
	for i, para := range strings.Split(doc, "\n\n") {
		if doc == "" {
			break
		}
		if i > 0 {
			lines = append(lines, "")
		}
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > 76 {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// resolve turns a "named" reference into the named shape's kind.
func (m *sdkModel) resolve(t *sdkType) *sdkType {
	if t.Kind != "named" {
		return t
	}
	st, ok := m.byName[t.Name]
	if !ok {
		panic("unknown shape " + t.Name)
	}
	switch {
	case st.Enum != nil:
		return &sdkType{Kind: "enum", Name: t.Name}
	case st.Union:
		return &sdkType{Kind: "union", Name: t.Name}
	default:
		return &sdkType{Kind: "struct", Name: t.Name}
	}
}

// fieldType is the Go type of a member: pointers for optional scalars and
// structures, values for enums, unions (interfaces), slices and maps.
func (m *sdkModel) fieldType(t *sdkType, pkg string) string {
	t = m.resolve(t)
	switch t.Kind {
	case "list":
		return "[]" + m.elemType(t.Elem, pkg)
	case "map":
		return "map[string]" + m.elemType(t.Elem, pkg)
	case "enum", "union":
		return pkg + t.Name
	case "struct":
		return "*" + pkg + t.Name
	}
	return "*" + m.elemType(t, pkg)
}

// elemType is the Go type of a list element or map value: never a pointer.
func (m *sdkModel) elemType(t *sdkType, pkg string) string {
	t = m.resolve(t)
	switch t.Kind {
	case "string":
		return "string"
	case "int32", "int64", "bool":
		return t.Kind
	case "double":
		return "float64"
	case "timestamp":
		return "time.Time"
	case "enum", "union", "struct":
		return pkg + t.Name
	case "list", "map":
		return m.fieldType(t, pkg)
	}
	panic("elemType " + t.Kind)
}

// fieldView is one struct field: its comment lines, name and Go type.
type fieldView struct {
	Doc        []string
	Name, Type string
}

// fields are the struct fields of members, a required one saying so.
func (m *sdkModel) fields(members []*sdkMember, pkg string) []fieldView {
	var out []fieldView
	for _, mem := range members {
		doc := mem.Doc
		if mem.Required {
			if doc != "" {
				doc += "\n\n"
			}
			doc += "This member is required."
		}
		out = append(out, fieldView{Doc: commentLines(doc), Name: mem.GoName, Type: m.fieldType(mem.T, pkg)})
	}
	return out
}

// ---- types/ ----------------------------------------------------------------

// shapeView is a structure, union or exception of types/.
type shapeView struct {
	Name    string
	Doc     []string
	Union   bool
	Fields  []fieldView       // a structure's or exception's members
	Members []unionMemberView // a union's members
	Fault   string            // an exception's smithy.ErrorFault
}

// unionMemberView is one member type of a union.
type unionMemberView struct {
	Doc         []string
	Type, Value string // UnionMemberX and the Go type of its Value
}

func typesView(m *sdkModel) any {
	var shapes []shapeView
	for _, st := range m.Types {
		v := shapeView{Name: st.Name, Union: st.Union}
		if st.Union {
			v.Doc = commentLines(st.Doc)
			for _, mem := range st.Members {
				v.Members = append(v.Members, unionMemberView{Doc: commentLines(mem.Doc), Type: st.Name + "Member" + mem.GoName, Value: m.elemType(mem.T, "")})
			}
		} else {
			doc := st.Doc
			if doc == "" {
				doc = st.Name + " is the " + st.Name + " structure of the model."
			}
			v.Doc = commentLines(doc)
			v.Fields = m.fields(st.Members, "")
		}
		shapes = append(shapes, v)
	}
	return struct {
		Title  string
		Shapes []shapeView
	}{m.Title, shapes}
}

// enumView is one enum: its type and its values' constants.
type enumView struct {
	Name   string
	Values []struct{ Const, Value string }
}

func enumsView(m *sdkModel) any {
	var enums []enumView
	for _, st := range m.Enums {
		e := enumView{Name: st.Name}
		for _, v := range st.Enum {
			e.Values = append(e.Values, struct{ Const, Value string }{enumConst(st.Name, v), v})
		}
		enums = append(enums, e)
	}
	return enums
}

func errorsView(m *sdkModel) any {
	var errs []shapeView
	for _, e := range m.Errors {
		doc := e.Doc
		if doc == "" {
			doc = fmt.Sprintf("%s is the modeled exception the service answers with HTTP %d.", e.Name, e.Error.Status)
		}
		var hasMessage bool
		var rest []*sdkMember
		for _, mem := range e.Members {
			if mem.Wire == "message" {
				hasMessage = true
				continue
			}
			rest = append(rest, mem)
		}
		if !hasMessage {
			panic(e.Name + " has no message member")
		}
		fault := "smithy.FaultClient"
		if e.Error.Fault == "server" {
			fault = "smithy.FaultServer"
		}
		errs = append(errs, shapeView{Name: e.Name, Doc: commentLines(doc), Fields: m.fields(rest, ""), Fault: fault})
	}
	return errs
}
