package schema

// The SDK generator's input validators: the model's required members,
// lengths, ranges, patterns and enums, checked before anything is sent. The
// view built here is laid out by sdktmpl/validators.go.tmpl; a value's checks
// nest (lists of maps of structures), so its view is a tree (valValue) the
// template walks recursively.

import (
	"sort"
	"strconv"
)

// valShapeView is the validator of an operation's input (Context is
// "<Op>Input"), a structure's or a union's.
type valShapeView struct {
	Name, Context string
	Union         bool
	Members       []valMember
}

// valMember checks one member: NilCheck says it is absent; a required
// member is refused when absent, any other is checked when present. A
// union's member has Type (its member type) and no NilCheck.
type valMember struct {
	GoName, NilCheck, Type string
	Required               bool
	Value                  *valValue
}

// valValue is the checks of Expr (reported as Field): the constraints C of
// its kind; for a list or map, Loop says its elements (Elem) or keys (Key)
// need checks of their own, in a loop whose names carry Depth.
type valValue struct {
	Kind, Name, Field, Expr string
	Depth                   int
	C                       constraints
	PatIdx                  int // C.Pattern's index in modelPatterns
	Loop                    bool
	Key, Elem               *valValue
}

// validators is the state of one validators.go: the model and the index of
// each of its patterns.
type validators struct {
	m      *sdkModel
	patIdx map[string]int
}

func validatorsView(m *sdkModel) any {
	// Every pattern of the model, compiled once.
	patterns := map[string]bool{}
	var collect func(t *sdkType)
	collect = func(t *sdkType) {
		if t.C.Pattern != "" {
			patterns[t.C.Pattern] = true
		}
		if t.KeyC.Pattern != "" {
			patterns[t.KeyC.Pattern] = true
		}
		if t.Elem != nil {
			collect(t.Elem)
		}
	}
	for _, op := range m.Ops {
		for _, mem := range op.Input.Members {
			collect(mem.T)
		}
	}
	for _, st := range m.Types {
		for _, mem := range st.Members {
			collect(mem.T)
		}
	}
	var pats []string
	for p := range patterns {
		pats = append(pats, p)
	}
	sort.Strings(pats)
	g := &validators{m: m, patIdx: map[string]int{}}
	for i, p := range pats {
		g.patIdx[p] = i
	}
	var ops, shapes []valShapeView
	for _, op := range m.Ops {
		v := valShapeView{Name: op.Name, Context: op.Name + "Input"}
		for _, mem := range op.Input.Members {
			v.Members = append(v.Members, g.member(mem))
		}
		ops = append(ops, v)
	}
	for _, st := range m.Types {
		v := valShapeView{Name: st.Name, Context: st.Name, Union: st.Union}
		for _, mem := range st.Members {
			if st.Union {
				v.Members = append(v.Members, valMember{Type: st.Name + "Member" + mem.GoName, Value: g.value("uv.Value", mem.GoName, mem.T, 2, false)})
				continue
			}
			v.Members = append(v.Members, g.member(mem))
		}
		shapes = append(shapes, v)
	}
	return struct {
		Patterns    []string
		Ops, Shapes []valShapeView
	}{pats, ops, shapes}
}

func (g *validators) member(mem *sdkMember) valMember {
	t := g.m.resolve(mem.T)
	f := "v." + mem.GoName
	v := valMember{GoName: mem.GoName, NilCheck: f + " == nil", Required: mem.Required}
	if t.Kind == "enum" {
		v.NilCheck = "len(" + f + ") == 0"
	}
	switch t.Kind {
	case "string", "int32", "int64", "double", "bool", "timestamp":
		v.Value = g.value("*"+f, mem.GoName, t, 2, false)
	default:
		v.Value = g.value(f, mem.GoName, t, 2, true)
	}
	return v
}

func (g *validators) value(expr, field string, t *sdkType, depth int, isPtr bool) *valValue {
	t = g.m.resolve(t)
	v := &valValue{Kind: t.Kind, Name: t.Name, Field: field, Expr: expr, Depth: depth, C: t.C}
	switch t.Kind {
	case "string":
		if t.C.Pattern != "" {
			v.PatIdx = g.patIdx[t.C.Pattern]
		}
	case "struct":
		if !isPtr {
			v.Expr = "&" + expr
		}
	case "list":
		if v.Loop = g.needsValidation(t.Elem); v.Loop {
			v.Elem = g.value(expr+"[i"+strconv.Itoa(depth)+"]", field+"[]", t.Elem, depth+1, false)
		}
	case "map":
		kt := &sdkType{Kind: "string", C: t.KeyC}
		if v.Loop = g.needsValidation(t.Elem) || g.needsValidation(kt); v.Loop {
			v.Key = g.value("k", field+" key", kt, depth+1, false)
			v.Elem = g.value("mv", field+" value", t.Elem, depth+1, false)
		}
	}
	return v
}

func (g *validators) needsValidation(t *sdkType) bool {
	t = g.m.resolve(t)
	switch t.Kind {
	case "struct", "union", "enum":
		return true
	case "list", "map":
		return t.C.any() || t.KeyC.any() || g.needsValidation(t.Elem)
	}
	return t.C.any()
}
