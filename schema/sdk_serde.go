package schema

// The SDK generator's REST-JSON serializers and deserializers: every input
// member bound to its path label, query key, header or body key, and every
// output and error shape decoded. The views built here are laid out by
// sdktmpl/serializers.go.tmpl and sdktmpl/deserializers.go.tmpl; a value's
// encoding or decoding nests (lists of maps of structures), so its view is a
// tree (serValue, decValue) the templates walk recursively.

import "fmt"

// ---- serializers.go ----------------------------------------------------------

// serOpView is one operation's serializer.
type serOpView struct {
	Name, Path, Method string
	Binds              []bindView  // path labels and query keys
	Body               []serMember // body members, nil when there is no body
	HasBody            bool
}

// bindView is one HTTP-bound input member: Kind is "uri" or the query
// encoding ("string", "int32", "enum", "list").
type bindView struct {
	Kind, Field, Wire, GoName string
}

// serMember is one structure member written under its JSON key; Token is the
// idempotency token, written from the call's context.
type serMember struct {
	Field, Wire string
	Enum, Token bool
	Value       *serValue
}

// serValue writes Expr into the smithyjson.Value named Val. A list or map
// loops with names suffixed by its depth, so nested loops do not shadow.
type serValue struct {
	Kind, Name, Expr, Val string
	Depth                 int
	Elem                  *serValue
}

// serShapeView is a structure's or union's document serializer.
type serShapeView struct {
	Name    string
	Union   bool
	Members []serMember // for a union, Field is its member type and Value reads uv.Value
}

func serializersView(m *sdkModel) any {
	var ops []serOpView
	for _, op := range m.Ops {
		v := serOpView{Name: op.Name, Path: op.Path, Method: op.Method, HasBody: op.HasBody}
		for _, mem := range op.Input.Members {
			if b, ok := m.bind(mem); ok {
				v.Binds = append(v.Binds, b)
			}
		}
		if op.HasBody {
			members := op.Input.Members
			if op.Token != nil {
				members = append(append([]*sdkMember{}, members...), op.Token)
			}
			for _, mem := range members {
				switch {
				case mem.Loc != "body":
				case mem.Token:
					v.Body = append(v.Body, serMember{Wire: mem.Wire, Token: true})
				default:
					v.Body = append(v.Body, m.serMember("v", mem))
				}
			}
		}
		ops = append(ops, v)
	}
	var shapes []serShapeView
	for _, st := range m.Types {
		v := serShapeView{Name: st.Name, Union: st.Union}
		for _, mem := range st.Members {
			if st.Union {
				v.Members = append(v.Members, serMember{Field: st.Name + "Member" + mem.GoName, Wire: mem.Wire, Value: m.serValue("uv.Value", mem.T, "av", 2, false)})
				continue
			}
			v.Members = append(v.Members, m.serMember("v", mem))
		}
		shapes = append(shapes, v)
	}
	return struct {
		Ops    []serOpView
		Shapes []serShapeView
	}{ops, shapes}
}

// bind is an HTTP-bound (path or query) input member; a body member is not.
func (m *sdkModel) bind(mem *sdkMember) (bindView, bool) {
	t := m.resolve(mem.T)
	v := bindView{Field: "input." + mem.GoName, Wire: mem.Wire, GoName: mem.GoName}
	switch mem.Loc {
	case "uri":
		if t.Kind != "string" {
			panic("non-string label " + mem.Wire)
		}
		v.Kind = "uri"
	case "query":
		switch t.Kind {
		case "string", "int32", "enum", "list":
			v.Kind = t.Kind
		default:
			panic("query kind " + t.Kind)
		}
	default:
		return v, false
	}
	return v, true
}

// serMember is one member of a structure under its JSON key; a scalar is
// held by pointer and written dereferenced.
func (m *sdkModel) serMember(recv string, mem *sdkMember) serMember {
	t := m.resolve(mem.T)
	f := recv + "." + mem.GoName
	v := serMember{Field: f, Wire: mem.Wire, Enum: t.Kind == "enum"}
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp":
		v.Value = m.serValue("*"+f, t, "ok", 2, false)
	case "struct":
		v.Value = m.serValue(f, t, "ok", 2, true)
	default:
		v.Value = m.serValue(f, t, "ok", 2, false)
	}
	return v
}

// serValue is the encoding of expr (of type t) into val; isPtr says a
// structure expr is already a pointer.
func (m *sdkModel) serValue(expr string, t *sdkType, val string, depth int, isPtr bool) *serValue {
	t = m.resolve(t)
	v := &serValue{Kind: t.Kind, Name: t.Name, Expr: expr, Val: val, Depth: depth}
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp", "enum", "union":
	case "struct":
		if !isPtr {
			v.Expr = "&" + expr
		}
	case "list":
		v.Elem = m.serValue(fmt.Sprintf("%s[i%d]", expr, depth), t.Elem, fmt.Sprintf("e%d", depth), depth+1, false)
	case "map":
		v.Elem = m.serValue(expr+"[k]", t.Elem, fmt.Sprintf("e%d", depth), depth+1, false)
	default:
		panic("serialize kind " + t.Kind)
	}
	return v
}

// ---- deserializers.go ----------------------------------------------------------

// decOpView is one operation's deserializer: its output members and the
// exceptions its errors may be.
type decOpView struct {
	Name    string
	Members []decMember
	Errors  []string
}

// decMember assigns one member from the JSON object body; Header reads an
// exception's member from a response header, Message its message.
type decMember struct {
	GoName, Wire    string
	Struct, Pointer bool // a structure's decoder; a scalar assigned by address
	Value           *decValue
	Ret             string // the statement a decoding error returns with
	Header, Message bool
}

// decValue is an expression of type (Go type, error) decoding Expr; Type is
// a list element's or map value's Go type.
type decValue struct {
	Kind, Name, Expr, Type string
	Elem                   *decValue
}

// decShapeView is an exception's, structure's or union's decoder.
type decShapeView struct {
	Name    string
	Union   bool
	Members []decMember // a union's: GoName is its member type
}

func deserializersView(m *sdkModel) any {
	const opRet = "return out, metadata, &smithy.DeserializationError{Err: err}"
	var ops []decOpView
	for _, op := range m.Ops {
		v := decOpView{Name: op.Name, Errors: op.Errors}
		for _, mem := range op.Output.Members {
			v.Members = append(v.Members, m.decMember(mem, opRet))
		}
		ops = append(ops, v)
	}
	var errs []decShapeView
	for _, e := range m.Errors {
		v := decShapeView{Name: e.Name}
		for _, mem := range e.Members {
			switch {
			case mem.Loc == "header":
				v.Members = append(v.Members, decMember{GoName: mem.GoName, Wire: mem.Wire, Header: true})
			case mem.Wire == "message":
				v.Members = append(v.Members, decMember{Message: true})
			default:
				v.Members = append(v.Members, m.decMember(mem, "return &smithy.DeserializationError{Err: err}"))
			}
		}
		errs = append(errs, v)
	}
	var shapes []decShapeView
	for _, st := range m.Types {
		v := decShapeView{Name: st.Name, Union: st.Union}
		for _, mem := range st.Members {
			if st.Union {
				v.Members = append(v.Members, decMember{GoName: st.Name + "Member" + mem.GoName, Wire: mem.Wire, Value: m.decValue(mem.T, "val")})
				continue
			}
			v.Members = append(v.Members, m.decMember(mem, "return nil, err"))
		}
		shapes = append(shapes, v)
	}
	return struct {
		Ops            []decOpView
		Errors, Shapes []decShapeView
	}{ops, errs, shapes}
}

func (m *sdkModel) decMember(mem *sdkMember, ret string) decMember {
	t := m.resolve(mem.T)
	v := decMember{GoName: mem.GoName, Wire: mem.Wire, Ret: ret, Value: m.decValue(t, "val")}
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp":
		v.Pointer = true
	case "struct":
		v.Struct = true
	}
	return v
}

// decValue is the decoding of expr (of type t).
func (m *sdkModel) decValue(t *sdkType, expr string) *decValue {
	t = m.resolve(t)
	v := &decValue{Kind: t.Kind, Name: t.Name, Expr: expr}
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp", "enum", "union", "struct":
	case "list", "map":
		v.Type = m.elemType(t.Elem, "types.")
		v.Elem = m.decValue(t.Elem, "v")
	default:
		panic("decode kind " + t.Kind)
	}
	return v
}
