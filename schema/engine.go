package schema

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// EngineContract is api/engine.yaml, decoded: the frames of the `microvm
// engine` stdio protocol, its ops (arguments and response type) and the
// response types only the engine answers with.
type EngineContract struct {
	ProtocolVersion string `yaml:"protocol_version"`
	Frames          struct {
		Request CLIShape `yaml:"request"`
		Reply   CLIShape `yaml:"reply"`
	} `yaml:"frames"`
	Ops []struct {
		Op       string   `yaml:"op"`
		Doc      string   `yaml:"doc"`
		Response string   `yaml:"response"`
		Streams  bool     `yaml:"streams"`
		Args     []CLIKey `yaml:"args"`
	} `yaml:"ops"`
	Responses []CLIResponse `yaml:"responses"`
}

// engineModel is the engine contract joined with api/cli.yaml: every
// response type an op may answer with, wherever it is declared.
type engineModel struct {
	e         *EngineContract
	c         *CLIContract
	tax       *Taxonomy
	responses map[string]CLIResponse
}

// LoadEngineContract reads api/engine.yaml and checks it against api/cli.yaml.
func loadEngineModel(root string) (*engineModel, error) {
	var e EngineContract
	if err := decodeStrict(root, "engine.yaml", &e); err != nil {
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
	m := &engineModel{e: &e, c: c, tax: tax, responses: map[string]CLIResponse{}}
	for _, r := range c.Responses {
		m.responses[r.Type] = r
	}
	for _, r := range e.Responses {
		if _, dup := m.responses[r.Type]; dup {
			return nil, fmt.Errorf("api/engine.yaml: response %s is already declared in api/cli.yaml", r.Type)
		}
		m.responses[r.Type] = r
	}
	if e.ProtocolVersion == "" {
		return nil, fmt.Errorf("api/engine.yaml: protocol_version is required")
	}
	seen := map[string]bool{}
	for _, op := range e.Ops {
		if seen[op.Op] {
			return nil, fmt.Errorf("api/engine.yaml: op %s twice", op.Op)
		}
		seen[op.Op] = true
		if _, ok := m.responses[op.Response]; !ok {
			return nil, fmt.Errorf("api/engine.yaml: op %s answers %s, which neither file declares", op.Op, op.Response)
		}
		// A stream's final envelope summarises its events; build's events
		// are its image build's progress, and its answer the sandbox.
		if op.Streams && op.Response != "microvm.exec.stream" && op.Response != "microvm.sandbox" {
			return nil, fmt.Errorf("api/engine.yaml: op %s streams, so it must answer microvm.exec.stream (or microvm.sandbox, as build does)", op.Op)
		}
		for _, k := range op.Args {
			if k.Ref != "" || k.Type == "object" || k.Nullable || k.Optional || (k.Type == "array" && k.Items != "string") {
				return nil, fmt.Errorf("api/engine.yaml: op %s arg %s: arguments are scalars or string arrays", op.Op, k.Name)
			}
		}
	}
	for _, keys := range [][]CLIKey{e.Frames.Request.Keys, e.Frames.Reply.Keys} {
		for _, k := range keys {
			if k.Ref != "" {
				return nil, fmt.Errorf("api/engine.yaml: frame key %s: frames hold no shapes", k.Name)
			}
		}
	}
	return m, nil
}

// usedTypes is every response type the ops answer with, in op order, and the
// closure of the shapes those reach, sorted.
func (m *engineModel) usedTypes() (responses []string, shapes []string) {
	seenR, seenS := map[string]bool{}, map[string]bool{}
	var walk func(keys []CLIKey)
	walk = func(keys []CLIKey) {
		for _, k := range keys {
			if k.Ref == "" || builtinShapes[k.Ref] || seenS[k.Ref] {
				continue
			}
			seenS[k.Ref] = true
			shapes = append(shapes, k.Ref)
			walk(m.c.Shapes[k.Ref])
		}
	}
	for _, op := range m.e.Ops {
		if !seenR[op.Response] {
			seenR[op.Response] = true
			responses = append(responses, op.Response)
			walk(m.responses[op.Response].Keys)
		}
	}
	sort.Strings(shapes)
	return responses, shapes
}

func argsIdent(op string) string { return goIdent(op) + "Args" }

func generateEngine(root string) ([]Output, error) {
	m, err := loadEngineModel(root)
	if err != nil {
		return nil, err
	}
	goSrc, err := m.goSource()
	if err != nil {
		return nil, err
	}
	py, err := m.python()
	if err != nil {
		return nil, err
	}
	ts, err := m.typescript()
	if err != nil {
		return nil, err
	}
	return []Output{
		{Path: "gen/engineapi/engineapi.gen.go", Data: goSrc},
		{Path: "clients/python/microvms/_contract.py", Data: []byte(py)},
		{Path: "clients/typescript/src/contract.ts", Data: []byte(ts)},
	}, nil
}

// goSource is gen/engineapi/engineapi.gen.go, laid out by
// templates/engineapi.go.tmpl.
func (m *engineModel) goSource() ([]byte, error) {
	type ident struct{ Ident, Value string }
	view := struct {
		ProtocolVersion string
		Ops             any
		OpIdents, Types []ident
		Structs         []goStruct
		Shapes          []string
	}{ProtocolVersion: m.e.ProtocolVersion, Ops: m.e.Ops}
	for _, op := range m.e.Ops {
		view.OpIdents = append(view.OpIdents, ident{goIdent(op.Op), op.Op})
	}
	for _, r := range m.e.Responses {
		view.Types = append(view.Types, ident{responseIdent(r.Type), r.Type})
	}
	// The request's args stay raw until its op is known.
	req := goStruct{Name: "Request", Doc: "is " + m.e.Frames.Request.Doc + "."}
	for _, k := range m.e.Frames.Request.Keys {
		t := goType(k)
		if k.Type == "object" {
			t = "json.RawMessage"
		}
		req.Fields = append(req.Fields, keyField(k, t, k.Doc))
	}
	view.Structs = append(view.Structs, req, keyStruct("Reply", "is "+m.e.Frames.Reply.Doc+".", m.e.Frames.Reply.Keys))
	for _, op := range m.e.Ops {
		view.Structs = append(view.Structs, keyStruct(argsIdent(op.Op), fmt.Sprintf("are the arguments of %s: %s.", op.Op, op.Doc), op.Args))
	}
	for _, r := range m.e.Responses {
		view.Structs = append(view.Structs, keyStruct(responseIdent(r.Type)+"Data", fmt.Sprintf("is the data of a %s envelope.", r.Type), r.Keys))
	}
	// The api/cli.yaml shapes an engine response refers to are gen/cliapi's
	// types under the same names: one Go type per shape.
	_, shapes := m.usedTypes()
	for _, sh := range shapes {
		view.Shapes = append(view.Shapes, goIdent(sh))
	}
	return renderGo("engineapi", "engineapi.go.tmpl", view)
}

// pyType is a key's Python annotation.
func pyType(k CLIKey) string {
	var t string
	switch k.Type {
	case "string":
		t = "str"
		if len(k.Enum) > 0 {
			var vs []string
			for _, e := range k.Enum {
				vs = append(vs, strconv.Quote(e))
			}
			t = "Literal[" + strings.Join(vs, ", ") + "]"
		}
	case "integer":
		t = "int"
	case "number":
		t = "float"
	case "boolean":
		t = "bool"
	case "object":
		if k.Ref != "" && !builtinShapes[k.Ref] {
			t = strconv.Quote(pyTypeName(k.Ref)) // a forward reference: shapes refer to each other in any order
		} else {
			t = "Dict[str, Any]"
		}
	case "array":
		switch {
		case k.Items == "string":
			t = "List[str]"
		case k.Items == "integer":
			t = "List[int]"
		case k.Ref != "":
			t = "List[" + strconv.Quote(pyTypeName(k.Ref)) + "]"
		default:
			t = "List[Any]"
		}
	}
	if k.Nullable {
		return "Optional[" + t + "]"
	}
	return t
}

// pyTypeName is a shape's type name in both clients: costReport -> CostReport.
func pyTypeName(shape string) string { return shapeIdent(shape) }

// pyDict is one TypedDict of _contract.py. The functional form takes any
// key, a Python keyword (from) included; optional keys go into a total=False
// subclass (Class), since Python 3.9 has no NotRequired.
type pyDict struct {
	Name, Doc       string
	Req, Opt, Class []pyEntry
}

// pyEntry is one key of a TypedDict and its annotation.
type pyEntry struct{ Key, Type string }

func newPyDict(name, doc string, lead []pyEntry, keys []CLIKey, total bool) pyDict {
	d := pyDict{Name: name, Doc: doc, Req: lead}
	for _, k := range keys {
		e := pyEntry{strconv.Quote(k.Name), pyType(k)}
		if k.Optional || !total {
			d.Opt = append(d.Opt, e)
		} else {
			d.Req = append(d.Req, e)
		}
		if k.Optional {
			d.Class = append(d.Class, pyEntry{k.Name, pyType(k)})
		}
	}
	return d
}

// engineOpView is one op as the Python and TypeScript packages call it.
type engineOpView struct {
	Op, Doc, Response, Args, Data, Ident string
	Streams                              bool
}

func (m *engineModel) opViews() []engineOpView {
	var ops []engineOpView
	for _, op := range m.e.Ops {
		ops = append(ops, engineOpView{Op: op.Op, Doc: op.Doc, Response: op.Response, Args: argsIdent(op.Op),
			Data: responseIdent(op.Response) + "Data", Ident: goIdent(op.Op), Streams: op.Streams})
	}
	return ops
}

// python is clients/python/microvms/_contract.py, laid out by
// templates/engine_contract.py.tmpl.
func (m *engineModel) python() (string, error) {
	responses, shapes := m.usedTypes()
	view := struct {
		ProtocolVersion, APIVersion string
		ErrorKinds, Ops             any
		Dicts, Args                 []pyDict
		Events                      []string
	}{ProtocolVersion: m.e.ProtocolVersion, APIVersion: m.c.APIVersion, ErrorKinds: m.tax.ErrorKinds, Ops: m.opViews()}
	for _, name := range shapes {
		view.Dicts = append(view.Dicts, newPyDict(pyTypeName(name), fmt.Sprintf("The %q shape of api/cli.yaml.", name), nil, m.c.Shapes[name], true))
	}
	for _, r := range responses {
		view.Dicts = append(view.Dicts, newPyDict(responseIdent(r)+"Data", fmt.Sprintf("The data of a %s envelope.", r), nil, m.responses[r].Keys, true))
	}
	for _, e := range m.c.StreamEvents {
		name := "Stream" + goIdent(e.Event) + "Line"
		view.Events = append(view.Events, name)
		view.Dicts = append(view.Dicts, newPyDict(name, fmt.Sprintf("One %q event of a stream.", e.Event),
			[]pyEntry{{`"event"`, "Literal[" + strconv.Quote(e.Event) + "]"}}, e.Keys, true))
	}
	view.Args = append(view.Args, newPyDict("FailureEnvelope", "A failed request's envelope: "+m.c.Envelope.Failure.Doc+".", nil, m.c.Envelope.Failure.Keys, true))
	for _, op := range m.e.Ops {
		view.Args = append(view.Args, newPyDict(argsIdent(op.Op), fmt.Sprintf("The arguments of %s: %s. Every key may be left out.", op.Op, op.Doc), nil, op.Args, false))
	}
	return renderText("engine_contract.py.tmpl", view)
}

// tsType is a key's TypeScript type.
func tsType(k CLIKey) string {
	var t string
	switch k.Type {
	case "string":
		t = "string"
		if len(k.Enum) > 0 {
			var vs []string
			for _, e := range k.Enum {
				vs = append(vs, strconv.Quote(e))
			}
			t = strings.Join(vs, " | ")
		}
	case "integer", "number":
		t = "number"
	case "boolean":
		t = "boolean"
	case "object":
		if k.Ref != "" && !builtinShapes[k.Ref] {
			t = pyTypeName(k.Ref)
		} else {
			t = "Record<string, unknown>"
		}
	case "array":
		switch {
		case k.Items == "string":
			t = "string[]"
		case k.Items == "integer":
			t = "number[]"
		case k.Ref != "":
			t = pyTypeName(k.Ref) + "[]"
		default:
			t = "unknown[]"
		}
	}
	if k.Nullable {
		return "(" + t + ") | null"
	}
	return t
}

// tsInterface is one interface of contract.ts.
type tsInterface struct {
	Name, Doc string
	Fields    []tsField
}

// tsField is one readonly key: Key is quoted, Optional adds its "?".
type tsField struct {
	Doc, Key, Type string
	Optional       bool
}

func newTSInterface(name, doc string, lead []tsField, keys []CLIKey, allOptional bool) tsInterface {
	t := tsInterface{Name: name, Doc: doc, Fields: lead}
	for _, k := range keys {
		t.Fields = append(t.Fields, tsField{Doc: k.Doc, Key: strconv.Quote(k.Name), Type: tsType(k), Optional: k.Optional || allOptional})
	}
	return t
}

// typescript is clients/typescript/src/contract.ts, laid out by
// templates/engine_contract.ts.tmpl.
func (m *engineModel) typescript() (string, error) {
	responses, shapes := m.usedTypes()
	view := struct {
		ProtocolVersion, APIVersion string
		ErrorKinds, Ops             any
		Interfaces, Args            []tsInterface
		Events                      []string
	}{ProtocolVersion: m.e.ProtocolVersion, APIVersion: m.c.APIVersion, ErrorKinds: m.tax.ErrorKinds, Ops: m.opViews()}
	for _, name := range shapes {
		view.Interfaces = append(view.Interfaces, newTSInterface(pyTypeName(name), fmt.Sprintf("The %q shape of api/cli.yaml.", name), nil, m.c.Shapes[name], false))
	}
	for _, r := range responses {
		view.Interfaces = append(view.Interfaces, newTSInterface(responseIdent(r)+"Data", fmt.Sprintf("The data of a %s envelope.", r), nil, m.responses[r].Keys, false))
	}
	for _, e := range m.c.StreamEvents {
		name := "Stream" + goIdent(e.Event) + "Line"
		view.Events = append(view.Events, name)
		view.Interfaces = append(view.Interfaces, newTSInterface(name, fmt.Sprintf("One %q event of a stream.", e.Event),
			[]tsField{{Key: `"event"`, Type: strconv.Quote(e.Event)}}, e.Keys, false))
	}
	view.Args = append(view.Args, newTSInterface("FailureEnvelope", "A failed request's envelope: "+m.c.Envelope.Failure.Doc+".", nil, m.c.Envelope.Failure.Keys, false))
	for _, op := range m.e.Ops {
		view.Args = append(view.Args, newTSInterface(argsIdent(op.Op), fmt.Sprintf("The arguments of %s: %s. Every key may be left out.", op.Op, op.Doc), nil, op.Args, true))
	}
	return renderText("engine_contract.ts.tmpl", view)
}

func init() { register(generateEngine) }
