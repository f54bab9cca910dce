package schema

// The SDK generator's input validators: the model's required members,
// lengths, ranges, patterns and enums, checked before anything is sent.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

func (g *sdkGen) validators() string {
	g.p("import (")
	for _, imp := range []string{"context", "fmt", "regexp", "sort"} {
		g.p("\t%q", imp)
	}
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p("\t%q", "github.com/aws/smithy-go/middleware")
	g.p("\t%q", "github.com/microvms/microvms/client/lambdamicrovms/types")
	g.p(")")
	g.p("")
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
	for _, op := range g.m.Ops {
		for _, mem := range op.Input.Members {
			collect(mem.T)
		}
	}
	for _, st := range g.m.Types {
		for _, mem := range st.Members {
			collect(mem.T)
		}
	}
	var pats []string
	for p := range patterns {
		pats = append(pats, p)
	}
	sort.Strings(pats)
	g.patIdx = map[string]int{}
	g.p("// The model's patterns, one regexp each.")
	g.p("var modelPatterns = []*regexp.Regexp{")
	for i, p := range pats {
		g.patIdx[p] = i
		g.p("\tregexp.MustCompile(%s),", strconv.Quote(p))
	}
	g.p("}")
	g.p("")
	for _, op := range g.m.Ops {
		n := op.Name
		g.p("type validateOp%s struct{}", n)
		g.p("")
		g.p("func (*validateOp%s) ID() string { return \"OperationInputValidation\" }", n)
		g.p("")
		g.p("func (m *validateOp%s) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (out middleware.InitializeOutput, metadata middleware.Metadata, err error) {", n)
		g.p("\tinput, ok := in.Parameters.(*%sInput)", n)
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, fmt.Errorf(\"unknown input parameters type %%T\", in.Parameters)")
		g.p("\t}")
		g.p("\tif err := validateOp%sInput(input); err != nil {", n)
		g.p("\t\treturn out, metadata, err")
		g.p("\t}")
		g.p("\treturn next.HandleInitialize(ctx, in)")
		g.p("}")
		g.p("")
		g.p("func addOp%sValidationMiddleware(stack *middleware.Stack) error {", n)
		g.p("\treturn stack.Initialize.Add(&validateOp%s{}, middleware.After)", n)
		g.p("}")
		g.p("")
		g.p("func validateOp%sInput(v *%sInput) error {", n, n)
		g.p("\tif v == nil {")
		g.p("\t\treturn nil")
		g.p("\t}")
		g.p("\tinvalidParams := smithy.InvalidParamsError{Context: %q}", n+"Input")
		for _, mem := range op.Input.Members {
			g.validateMember(mem)
		}
		g.p("\tif invalidParams.Len() > 0 {")
		g.p("\t\treturn invalidParams")
		g.p("\t}")
		g.p("\treturn nil")
		g.p("}")
		g.p("")
	}
	for _, st := range g.m.Types {
		if st.Union {
			g.p("func validate%s(v types.%s) error {", st.Name, st.Name)
			g.p("\tinvalidParams := smithy.InvalidParamsError{Context: %q}", st.Name)
			g.p("\tswitch uv := v.(type) {")
			for _, mem := range st.Members {
				g.p("\tcase *types.%sMember%s:", st.Name, mem.GoName)
				g.validateValue("uv.Value", mem.GoName, mem.T, 2, false)
			}
			g.p("\t}")
			g.p("\tif invalidParams.Len() > 0 {")
			g.p("\t\treturn invalidParams")
			g.p("\t}")
			g.p("\treturn nil")
			g.p("}")
			g.p("")
			continue
		}
		g.p("func validate%s(v *types.%s) error {", st.Name, st.Name)
		g.p("\tif v == nil {")
		g.p("\t\treturn nil")
		g.p("\t}")
		g.p("\tinvalidParams := smithy.InvalidParamsError{Context: %q}", st.Name)
		for _, mem := range st.Members {
			g.validateMember(mem)
		}
		g.p("\tif invalidParams.Len() > 0 {")
		g.p("\t\treturn invalidParams")
		g.p("\t}")
		g.p("\treturn nil")
		g.p("}")
		g.p("")
	}
	return g.take()
}

func (g *sdkGen) validateMember(mem *sdkMember) {
	t := g.resolve(mem.T)
	f := "v." + mem.GoName
	nilCheck := f + " == nil"
	if t.Kind == "enum" {
		nilCheck = "len(" + f + ") == 0"
	}
	if mem.Required {
		g.p("\tif %s {", nilCheck)
		g.p("\t\tinvalidParams.Add(smithy.NewErrParamRequired(%q))", mem.GoName)
		g.p("\t} else {")
	} else {
		g.p("\tif !(%s) {", nilCheck)
	}
	switch t.Kind {
	case "string", "int32", "int64", "double", "bool", "timestamp":
		g.validateValue("*"+f, mem.GoName, t, 2, false)
	default:
		g.validateValue(f, mem.GoName, t, 2, true)
	}
	g.p("\t}")
}

func (g *sdkGen) validateValue(expr, field string, t *sdkType, depth int, isPtr bool) {
	t = g.resolve(t)
	ind := strings.Repeat("\t", depth)
	fq := strconv.Quote(field)
	c := t.C
	switch t.Kind {
	case "string":
		if c.MinLen != nil || c.MaxLen != nil {
			g.p("%scheckLength(&invalidParams, %s, %s, %s, %s)", ind, fq, expr, bound(c.MinLen), bound(c.MaxLen))
		}
		if c.Pattern != "" {
			g.p("%scheckPattern(&invalidParams, %s, %s, modelPatterns[%d])", ind, fq, expr, g.patIdx[c.Pattern])
		}
	case "int32", "int64":
		if c.Min != nil || c.Max != nil {
			g.p("%scheckRange(&invalidParams, %s, int64(%s), %s, %s)", ind, fq, expr, bound(c.Min), bound(c.Max))
		}
	case "enum":
		g.p("%scheckEnum(&invalidParams, %s, %s)", ind, fq, expr)
	case "struct", "union":
		if t.Kind == "struct" && !isPtr {
			expr = "&" + expr
		}
		g.p("%sif err := validate%s(%s); err != nil {", ind, t.Name, expr)
		g.p("%s\tinvalidParams.AddNested(%s, err.(smithy.InvalidParamsError))", ind, fq)
		g.p("%s}", ind)
	case "list":
		if c.MinItems != nil || c.MaxItems != nil {
			g.p("%scheckCount(&invalidParams, %s, len(%s), %s, %s)", ind, fq, expr, bound(c.MinItems), bound(c.MaxItems))
		}
		if g.needsValidation(t.Elem) {
			idx := fmt.Sprintf("i%d", depth)
			g.p("%sfor %s := range %s {", ind, idx, expr)
			g.validateValue(expr+"["+idx+"]", field+"[]", t.Elem, depth+1, false)
			g.p("%s}", ind)
		}
	case "map":
		if c.MinItems != nil || c.MaxItems != nil {
			g.p("%scheckCount(&invalidParams, %s, len(%s), %s, %s)", ind, fq, expr, bound(c.MinItems), bound(c.MaxItems))
		}
		kt := &sdkType{Kind: "string", C: t.KeyC}
		if g.needsValidation(t.Elem) || g.needsValidation(kt) {
			g.p("%sfor k, mv := range %s {", ind, expr)
			g.p("%s\t_ = mv", ind)
			g.validateValue("k", field+" key", kt, depth+1, false)
			g.validateValue("mv", field+" value", t.Elem, depth+1, false)
			g.p("%s}", ind)
		}
	}
}

func (g *sdkGen) needsValidation(t *sdkType) bool {
	t = g.resolve(t)
	switch t.Kind {
	case "struct", "union", "enum":
		return true
	case "list", "map":
		return t.C.any() || t.KeyC.any() || g.needsValidation(t.Elem)
	}
	return t.C.any()
}

func bound(v *int64) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("ptrInt64(%d)", *v)
}
