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
		if op.Streams && op.Response != "microvm.exec.stream" {
			return nil, fmt.Errorf("api/engine.yaml: op %s streams, so it must answer microvm.exec.stream", op.Op)
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
	return []Output{
		{Path: "gen/engineapi/engineapi.gen.go", Data: goSrc},
		{Path: "clients/python/microvms/_contract.py", Data: []byte(m.python())},
		{Path: "clients/typescript/src/contract.ts", Data: []byte(m.typescript())},
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
				vs = append(vs, pyStr(e))
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
			t = pyStr(pyTypeName(k.Ref)) // a forward reference: shapes refer to each other in any order
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
			t = "List[" + pyStr(pyTypeName(k.Ref)) + "]"
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

// pyTypedDict writes a TypedDict. The functional form takes any key, a
// Python keyword (from) included; optional keys go into a total=False
// subclass, since Python 3.9 has no NotRequired.
func pyTypedDict(b *strings.Builder, name, doc string, lead []string, keys []CLIKey, total bool) {
	var req, opt []string
	req = append(req, lead...)
	for _, k := range keys {
		entry := fmt.Sprintf("    %s: %s,\n", pyStr(k.Name), pyType(k))
		if k.Optional || !total {
			opt = append(opt, entry)
		} else {
			req = append(req, entry)
		}
	}
	if len(opt) == 0 {
		fmt.Fprintf(b, "%s = TypedDict(%s, {\n%s})\n", name, pyStr(name), strings.Join(req, ""))
	} else if len(req) == 0 {
		fmt.Fprintf(b, "%s = TypedDict(%s, {\n%s}, total=False)\n", name, pyStr(name), strings.Join(opt, ""))
	} else {
		fmt.Fprintf(b, "_%sRequired = TypedDict(%s, {\n%s})\n\n\n", name, pyStr("_"+name+"Required"), strings.Join(req, ""))
		fmt.Fprintf(b, "class %s(_%sRequired, total=False):\n", name, name)
		for _, k := range keys {
			if k.Optional {
				fmt.Fprintf(b, "    %s: %s\n", k.Name, pyType(k))
			}
		}
	}
	fmt.Fprintf(b, "%s.__doc__ = %s\n\n\n", name, pyStr(doc))
}

func (m *engineModel) python() string {
	responses, shapes := m.usedTypes()
	var b strings.Builder
	b.WriteString(`# Code generated by github.com/microvms/microvms/schema from api/engine.yaml,
# api/cli.yaml and api/errors.yaml; DO NOT EDIT.
"""The microvm engine protocol's types: the request arguments of each op, the
data of each envelope an op answers with, the stream events, and the error
table. The package's classes wrap these; nothing here has behaviour beyond
one typed method per op over Ops._call.
"""
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Tuple, TypedDict, Union, cast

`)
	fmt.Fprintf(&b, "PROTOCOL_VERSION = %s\nENVELOPE_API_VERSION = %s\n\n", pyStr(m.e.ProtocolVersion), pyStr(m.c.APIVersion))
	b.WriteString("# Each error code of api/errors.yaml: its kind and the CLI exit code it decides.\nERROR_KINDS: Dict[str, Tuple[str, int]] = {\n")
	for _, k := range m.tax.ErrorKinds {
		fmt.Fprintf(&b, "    %s: (%s, %d),\n", pyStr(k.Code), pyStr(k.Name), k.Exit)
	}
	b.WriteString("}\n\n")
	b.WriteString("# Each op: the response type its envelope carries, and whether event frames precede it.\nOPS: Dict[str, Tuple[str, bool]] = {\n")
	for _, op := range m.e.Ops {
		fmt.Fprintf(&b, "    %s: (%s, %s),\n", pyStr(op.Op), pyStr(op.Response), map[bool]string{true: "True", false: "False"}[op.Streams])
	}
	b.WriteString("}\n\n\n")
	for _, name := range shapes {
		pyTypedDict(&b, pyTypeName(name), fmt.Sprintf("The %q shape of api/cli.yaml.", name), nil, m.c.Shapes[name], true)
	}
	for _, r := range responses {
		pyTypedDict(&b, responseIdent(r)+"Data", fmt.Sprintf("The data of a %s envelope.", r), nil, m.responses[r].Keys, true)
	}
	var events []string
	for _, e := range m.c.StreamEvents {
		name := "Stream" + goIdent(e.Event) + "Line"
		events = append(events, name)
		pyTypedDict(&b, name, fmt.Sprintf("One %q event of a stream.", e.Event),
			[]string{fmt.Sprintf("    \"event\": Literal[%s],\n", pyStr(e.Event))}, e.Keys, true)
	}
	fmt.Fprintf(&b, "StreamEvent = Union[%s]\n\n\n", strings.Join(events, ", "))
	pyTypedDict(&b, "FailureEnvelope", "A failed request's envelope: "+m.c.Envelope.Failure.Doc+".", nil, m.c.Envelope.Failure.Keys, true)
	for _, op := range m.e.Ops {
		pyTypedDict(&b, argsIdent(op.Op), fmt.Sprintf("The arguments of %s: %s. Every key may be left out.", op.Op, op.Doc), nil, op.Args, false)
	}
	b.WriteString(`class Ops:
    """One typed method per op; a subclass sends the request in _call and _stream."""

    def _call(self, op: str, args: Mapping[str, Any]) -> Dict[str, Any]:
        raise NotImplementedError

    def _stream(self, op: str, args: Mapping[str, Any]) -> Iterator[Union[StreamEvent, Dict[str, Any]]]:
        raise NotImplementedError

`)
	for _, op := range m.e.Ops {
		data := responseIdent(op.Response) + "Data"
		if op.Streams {
			fmt.Fprintf(&b, "    def _op_%s(self, args: %s) -> Iterator[Union[StreamEvent, %s]]:\n", op.Op, argsIdent(op.Op), data)
			fmt.Fprintf(&b, "        \"\"\"%s; the last item is the envelope's data.\"\"\"\n", op.Doc)
			fmt.Fprintf(&b, "        return cast(Iterator[Union[StreamEvent, %s]], self._stream(%s, args))\n\n", data, pyStr(op.Op))
			continue
		}
		fmt.Fprintf(&b, "    def _op_%s(self, args: %s) -> %s:\n", op.Op, argsIdent(op.Op), data)
		fmt.Fprintf(&b, "        \"\"\"%s.\"\"\"\n", op.Doc)
		fmt.Fprintf(&b, "        return cast(%s, self._call(%s, args))\n\n", data, pyStr(op.Op))
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
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

func tsInterface(b *strings.Builder, name, doc string, lead []string, keys []CLIKey, allOptional bool) {
	fmt.Fprintf(b, "/** %s */\nexport interface %s {\n", doc, name)
	for _, l := range lead {
		b.WriteString(l)
	}
	for _, k := range keys {
		if k.Doc != "" {
			fmt.Fprintf(b, "  /** %s */\n", k.Doc)
		}
		opt := ""
		if k.Optional || allOptional {
			opt = "?"
		}
		fmt.Fprintf(b, "  readonly %s%s: %s;\n", strconv.Quote(k.Name), opt, tsType(k))
	}
	b.WriteString("}\n\n")
}

func (m *engineModel) typescript() string {
	responses, shapes := m.usedTypes()
	var b strings.Builder
	b.WriteString(`// Code generated by github.com/microvms/microvms/schema from api/engine.yaml,
// api/cli.yaml and api/errors.yaml; DO NOT EDIT.
//
// The microvm engine protocol's types: the request arguments of each op, the
// data of each envelope an op answers with, the stream events, and the error
// table. The package's classes wrap these; nothing here has behaviour beyond
// one typed method per op over Ops.call.

`)
	fmt.Fprintf(&b, "export const PROTOCOL_VERSION = %q;\nexport const ENVELOPE_API_VERSION = %q;\n\n", m.e.ProtocolVersion, m.c.APIVersion)
	b.WriteString("/** Each error code of api/errors.yaml: its kind and the CLI exit code it decides. */\nexport const ERROR_KINDS = {\n")
	for _, k := range m.tax.ErrorKinds {
		fmt.Fprintf(&b, "  %s: { kind: %q, exitCode: %d },\n", k.Code, k.Name, k.Exit)
	}
	b.WriteString("} as const;\n\nexport type ErrorCode = keyof typeof ERROR_KINDS;\n\n")
	b.WriteString("/** Each op: the response type its envelope carries, and whether event frames precede it. */\nexport const OPS = {\n")
	for _, op := range m.e.Ops {
		fmt.Fprintf(&b, "  %s: { response: %q, streams: %t },\n", op.Op, op.Response, op.Streams)
	}
	b.WriteString("} as const;\n\nexport type OpName = keyof typeof OPS;\n\n")
	for _, name := range shapes {
		tsInterface(&b, pyTypeName(name), fmt.Sprintf("The %q shape of api/cli.yaml.", name), nil, m.c.Shapes[name], false)
	}
	for _, r := range responses {
		tsInterface(&b, responseIdent(r)+"Data", fmt.Sprintf("The data of a %s envelope.", r), nil, m.responses[r].Keys, false)
	}
	var events []string
	for _, e := range m.c.StreamEvents {
		name := "Stream" + goIdent(e.Event) + "Line"
		events = append(events, name)
		tsInterface(&b, name, fmt.Sprintf("One %q event of a stream.", e.Event),
			[]string{fmt.Sprintf("  readonly \"event\": %q;\n", e.Event)}, e.Keys, false)
	}
	fmt.Fprintf(&b, "export type StreamEvent = %s;\n\n", strings.Join(events, " | "))
	tsInterface(&b, "FailureEnvelope", "A failed request's envelope: "+m.c.Envelope.Failure.Doc+".", nil, m.c.Envelope.Failure.Keys, false)
	for _, op := range m.e.Ops {
		tsInterface(&b, argsIdent(op.Op), fmt.Sprintf("The arguments of %s: %s. Every key may be left out.", op.Op, op.Doc), nil, op.Args, true)
	}
	b.WriteString(`/** One typed method per op; a subclass sends the request in call and stream. */
export abstract class Ops {
  protected abstract call(op: OpName, args: object): Promise<unknown>;
  protected abstract stream(op: OpName, args: object): AsyncIterable<unknown>;

`)
	for _, op := range m.e.Ops {
		data := responseIdent(op.Response) + "Data"
		fn := "op" + goIdent(op.Op)
		if op.Streams {
			fmt.Fprintf(&b, "  /** %s; the last item is the envelope's data. */\n", op.Doc)
			fmt.Fprintf(&b, "  protected %s(args: %s): AsyncIterable<StreamEvent | %s> {\n    return this.stream(%q, args) as AsyncIterable<StreamEvent | %s>;\n  }\n\n", fn, argsIdent(op.Op), data, op.Op, data)
			continue
		}
		fmt.Fprintf(&b, "  /** %s. */\n", op.Doc)
		fmt.Fprintf(&b, "  protected async %s(args: %s): Promise<%s> {\n    return (await this.call(%q, args)) as %s;\n  }\n\n", fn, argsIdent(op.Op), data, op.Op, data)
	}
	return strings.TrimRight(b.String(), "\n") + "\n}\n"
}

func init() { register(generateEngine) }
