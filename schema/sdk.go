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

// SDKDir is the generated service package's directory.
const SDKDir = "client/lambdamicrovms"

//go:embed sdkcore/*.go.tmpl
var sdkCore embed.FS

func init() { register(generateSDK) }

func generateSDK(root string) ([]Output, error) {
	m, err := loadSDKModel(root)
	if err != nil {
		return nil, err
	}
	g := &sdkGen{m: m}
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
		if err := add("api_op_"+op.Name+".go", "lambdamicrovms", g.opFile(op)); err != nil {
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
	for _, f := range []struct {
		name string
		body func() string
	}{
		{"serializers.go", g.serializers},
		{"deserializers.go", g.deserializers},
		{"validators.go", g.validators},
	} {
		if err := add(f.name, "lambdamicrovms", f.body()); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		body func() string
	}{
		{"types/types.go", g.typesFile},
		{"types/enums.go", g.enumsFile},
		{"types/errors.go", g.errorsFile},
	} {
		if err := add(f.name, "types", f.body()); err != nil {
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

type sdkGen struct {
	m      *sdkModel
	b      strings.Builder
	patIdx map[string]int
}

func (g *sdkGen) p(format string, args ...any) {
	fmt.Fprintf(&g.b, format, args...)
	g.b.WriteByte('\n')
}

func (g *sdkGen) take() string {
	s := g.b.String()
	g.b.Reset()
	return s
}

// comment writes doc as a Go comment block, wrapped near 80 columns.
func (g *sdkGen) comment(indent, doc string) {
	if doc == "" {
		return
	}
	for i, para := range strings.Split(doc, "\n\n") {
		if i > 0 {
			g.p("%s//", indent)
		}
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > 76 {
				g.p("%s// %s", indent, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		if line != "" {
			g.p("%s// %s", indent, line)
		}
	}
}

// resolve turns a "named" reference into the named shape's kind.
func (g *sdkGen) resolve(t *sdkType) *sdkType {
	if t.Kind != "named" {
		return t
	}
	st, ok := g.m.byName[t.Name]
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
func (g *sdkGen) fieldType(t *sdkType, pkg string) string {
	t = g.resolve(t)
	switch t.Kind {
	case "list":
		return "[]" + g.elemType(t.Elem, pkg)
	case "map":
		return "map[string]" + g.elemType(t.Elem, pkg)
	case "enum", "union":
		return pkg + t.Name
	case "struct":
		return "*" + pkg + t.Name
	}
	return "*" + g.elemType(t, pkg)
}

// elemType is the Go type of a list element or map value: never a pointer.
func (g *sdkGen) elemType(t *sdkType, pkg string) string {
	t = g.resolve(t)
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
		return g.fieldType(t, pkg)
	}
	panic("elemType " + t.Kind)
}

func (g *sdkGen) structFields(members []*sdkMember, pkg string, withMeta bool) {
	for _, mem := range members {
		doc := mem.Doc
		if mem.Required {
			if doc != "" {
				doc += "\n\n"
			}
			doc += "This member is required."
		}
		g.comment("\t", doc)
		g.p("\t%s %s", mem.GoName, g.fieldType(mem.T, pkg))
		g.p("")
	}
	if withMeta {
		g.p("\t// Metadata pertaining to the operation's result.")
		g.p("\tResultMetadata middleware.Metadata")
		g.p("")
	}
	g.p("\tnoSmithyDocumentSerde")
}

// ---- types/ ----------------------------------------------------------------

func (g *sdkGen) typesFile() string {
	g.p("// Package types holds the shapes of the %s API: structures, unions,", g.m.Title)
	g.p("// enums and modeled exceptions, as aws-sdk-go-v2's service types packages do.")
	g.p("")
	g.p("import (")
	g.p("\t%q", "time")
	g.p("\tsmithydocument %q", "github.com/aws/smithy-go/document")
	g.p(")")
	g.p("")
	g.p("type noSmithyDocumentSerde = smithydocument.NoSerde")
	g.p("")
	for _, st := range g.m.Types {
		if st.Union {
			g.comment("", st.Doc)
			g.p("//")
			g.p("// The following types satisfy this interface:")
			g.p("//")
			for _, mem := range st.Members {
				g.p("//\t%sMember%s", st.Name, mem.GoName)
			}
			g.p("type %s interface {", st.Name)
			g.p("\tis%s()", st.Name)
			g.p("}")
			g.p("")
			for _, mem := range st.Members {
				g.comment("", mem.Doc)
				g.p("type %sMember%s struct {", st.Name, mem.GoName)
				g.p("\tValue %s", g.elemType(mem.T, ""))
				g.p("")
				g.p("\tnoSmithyDocumentSerde")
				g.p("}")
				g.p("")
				g.p("func (*%sMember%s) is%s() {}", st.Name, mem.GoName, st.Name)
				g.p("")
			}
			continue
		}
		doc := st.Doc
		if doc == "" {
			doc = st.Name + " is the " + st.Name + " structure of the model."
		}
		g.comment("", doc)
		g.p("type %s struct {", st.Name)
		g.structFields(st.Members, "", false)
		g.p("}")
		g.p("")
	}
	g.p("// UnknownUnionMember is returned when a union member is returned over the")
	g.p("// wire, but has an unknown tag.")
	g.p("type UnknownUnionMember struct {")
	g.p("\tTag   string")
	g.p("\tValue []byte")
	g.p("")
	g.p("\tnoSmithyDocumentSerde")
	g.p("}")
	g.p("")
	for _, st := range g.m.Types {
		if st.Union {
			g.p("func (*UnknownUnionMember) is%s() {}", st.Name)
		}
	}
	return g.take()
}

func (g *sdkGen) enumsFile() string {
	for _, st := range g.m.Enums {
		g.p("// %s is one of the values of the %s enum.", st.Name, st.Name)
		g.p("type %s string", st.Name)
		g.p("")
		g.p("// Enum values for %s", st.Name)
		g.p("const (")
		for _, v := range st.Enum {
			g.p("\t%s %s = %q", enumConst(st.Name, v), st.Name, v)
		}
		g.p(")")
		g.p("")
		g.p("// Values returns all known values for %s. Note that this can be expanded in", st.Name)
		g.p("// the future, and so it is only as up to date as the client.")
		g.p("//")
		g.p("// The ordering of this slice is not guaranteed to be stable across updates.")
		g.p("func (%s) Values() []%s {", st.Name, st.Name)
		g.p("\treturn []%s{", st.Name)
		for _, v := range st.Enum {
			g.p("\t\t%q,", v)
		}
		g.p("\t}")
		g.p("}")
		g.p("")
	}
	return g.take()
}

func (g *sdkGen) errorsFile() string {
	g.p("import (")
	g.p("\t%q", "fmt")
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p(")")
	g.p("")
	for _, e := range g.m.Errors {
		doc := e.Doc
		if doc == "" {
			doc = fmt.Sprintf("%s is the modeled exception the service answers with HTTP %d.", e.Name, e.Error.Status)
		}
		g.comment("", doc)
		g.p("type %s struct {", e.Name)
		var hasMessage bool
		for _, mem := range e.Members {
			if mem.Wire == "message" {
				hasMessage = true
				g.p("\tMessage *string")
				g.p("")
			}
		}
		if !hasMessage {
			panic(e.Name + " has no message member")
		}
		g.p("\tErrorCodeOverride *string")
		g.p("")
		var rest []*sdkMember
		for _, mem := range e.Members {
			if mem.Wire != "message" {
				rest = append(rest, mem)
			}
		}
		g.structFields(rest, "", false)
		g.p("}")
		g.p("")
		g.p("func (e *%s) Error() string {", e.Name)
		g.p("\treturn fmt.Sprintf(\"%%s: %%s\", e.ErrorCode(), e.ErrorMessage())")
		g.p("}")
		g.p("func (e *%s) ErrorMessage() string {", e.Name)
		g.p("\tif e.Message == nil {")
		g.p("\t\treturn \"\"")
		g.p("\t}")
		g.p("\treturn *e.Message")
		g.p("}")
		g.p("func (e *%s) ErrorCode() string {", e.Name)
		g.p("\tif e == nil || e.ErrorCodeOverride == nil {")
		g.p("\t\treturn %q", e.Name)
		g.p("\t}")
		g.p("\treturn *e.ErrorCodeOverride")
		g.p("}")
		fault := "smithy.FaultClient"
		if e.Error.Fault == "server" {
			fault = "smithy.FaultServer"
		}
		g.p("func (e *%s) ErrorFault() smithy.ErrorFault { return %s }", e.Name, fault)
		g.p("")
	}
	return g.take()
}

// ---- api_op_<Operation>.go --------------------------------------------------
