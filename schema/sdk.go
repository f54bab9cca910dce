package schema

import (
	"bytes"
	"embed"
	"fmt"
	"path"
	"sort"
	"strconv"
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

func (g *sdkGen) opFile(op *sdkOp) string {
	g.p("import (")
	for _, imp := range []string{"context", "errors", "fmt", "time"} {
		g.p("\t%q", imp)
	}
	g.p("\t%q", "github.com/aws/smithy-go/middleware")
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p("\tsmithytime %q", "github.com/aws/smithy-go/time")
	g.p("\tsmithywaiter %q", "github.com/aws/smithy-go/waiter")
	g.p("\t%q", "github.com/microvms/microvms/client/lambdamicrovms/types")
	g.p(")")
	g.p("")
	doc := op.Doc
	if doc == "" {
		doc = op.Name + " calls the " + op.Name + " operation."
	}
	g.comment("", doc)
	if op.Token != nil {
		g.p("//")
		g.p("// The request's %s is minted by this client for each call from crypto/rand", op.Token.Wire)
		g.p("// and reused by that call's retries; a caller cannot choose one (see the")
		g.p("// client-token-permanent finding in docs/PLATFORM.md).")
	}
	for i, f := range op.Finding {
		g.p("//")
		label, note, _ := strings.Cut(op.Note[i], "|")
		g.comment("", fmt.Sprintf("%s (docs/PLATFORM.md, %s): %s", label, f, note))
	}
	g.p("func (c *Client) %s(ctx context.Context, params *%sInput, optFns ...func(*Options)) (*%sOutput, error) {", op.Name, op.Name, op.Name)
	g.p("\tif params == nil {")
	g.p("\t\tparams = &%sInput{}", op.Name)
	g.p("\t}")
	g.p("")
	g.p("\tresult, metadata, err := c.invokeOperation(ctx, %q, params, optFns, c.addOperation%sMiddlewares)", op.Name, op.Name)
	g.p("\tif err != nil {")
	g.p("\t\treturn nil, err")
	g.p("\t}")
	g.p("")
	g.p("\tout := result.(*%sOutput)", op.Name)
	g.p("\tout.ResultMetadata = metadata")
	g.p("\treturn out, nil")
	g.p("}")
	g.p("")
	g.p("// %sInput is the input of %s.", op.Name, op.Name)
	g.p("type %sInput struct {", op.Name)
	g.structFields(op.Input.Members, "types.", false)
	g.p("}")
	g.p("")
	g.p("// %sOutput is the output of %s.", op.Name, op.Name)
	g.p("type %sOutput struct {", op.Name)
	g.structFields(op.Output.Members, "types.", true)
	g.p("}")
	g.p("")
	g.p("func (c *Client) addOperation%sMiddlewares(stack *middleware.Stack, options Options) (err error) {", op.Name)
	g.p("\tif err := stack.Serialize.Add(&awsRestjson1_serializeOp%s{}, middleware.After); err != nil {", op.Name)
	g.p("\t\treturn err")
	g.p("\t}")
	g.p("\tif err := stack.Deserialize.Add(&awsRestjson1_deserializeOp%s{}, middleware.After); err != nil {", op.Name)
	g.p("\t\treturn err")
	g.p("\t}")
	g.p("\tif err := addClientMiddlewares(stack, options, %q); err != nil {", op.Name)
	g.p("\t\treturn err")
	g.p("\t}")
	if op.Token != nil {
		g.p("\tif err := addIdempotencyToken(stack, options, %q); err != nil {", op.Name)
		g.p("\t\treturn err")
		g.p("\t}")
	}
	g.p("\tif err := addOp%sValidationMiddleware(stack); err != nil {", op.Name)
	g.p("\t\treturn err")
	g.p("\t}")
	g.p("\treturn addCustomizations(stack, options, %q)", op.Name)
	g.p("}")
	g.p("")
	if op.Paginator != nil || len(op.Waiters) > 0 {
		g.p("// %sAPIClient is a client that implements the %s operation.", op.Name, op.Name)
		g.p("type %sAPIClient interface {", op.Name)
		g.p("\t%s(context.Context, *%sInput, ...func(*Options)) (*%sOutput, error)", op.Name, op.Name, op.Name)
		g.p("}")
		g.p("")
		g.p("var _ %sAPIClient = (*Client)(nil)", op.Name)
		g.p("")
	}
	if op.Paginator != nil {
		g.paginator(op)
	}
	for _, w := range op.Waiters {
		g.waiter(op, w)
	}
	return g.take()
}

func (g *sdkGen) member(st *sdkStruct, wire string) *sdkMember {
	for _, m := range st.Members {
		if m.Wire == wire {
			return m
		}
	}
	panic(st.Name + " has no member " + wire)
}

func (g *sdkGen) paginator(op *sdkOp) {
	n := op.Name
	in := g.member(op.Input, op.Paginator.InputToken).GoName
	out := g.member(op.Output, op.Paginator.OutputToken).GoName
	size := g.member(op.Input, op.Paginator.PageSize).GoName
	g.p("// %sPaginatorOptions is the paginator options for %s", n, n)
	g.p("type %sPaginatorOptions struct {", n)
	g.p("\t// The page size requested of the service (%s); 0 leaves it to the service.", op.Paginator.PageSize)
	g.p("\tLimit int32")
	g.p("")
	g.p("\t// Set to true if pagination should stop if the service returns a pagination")
	g.p("\t// token that matches the most recent token provided to the service.")
	g.p("\tStopOnDuplicateToken bool")
	g.p("}")
	g.p("")
	g.p("// %sPaginator is a paginator for %s. Only an absent %s ends a", n, n, op.Paginator.OutputToken)
	g.p("// listing: a page may be empty while later pages hold items.")
	g.p("type %sPaginator struct {", n)
	g.p("\toptions   %sPaginatorOptions", n)
	g.p("\tclient    %sAPIClient", n)
	g.p("\tparams    *%sInput", n)
	g.p("\tnextToken *string")
	g.p("\tfirstPage bool")
	g.p("}")
	g.p("")
	g.p("// New%sPaginator returns a new %sPaginator", n, n)
	g.p("func New%sPaginator(client %sAPIClient, params *%sInput, optFns ...func(*%sPaginatorOptions)) *%sPaginator {", n, n, n, n, n)
	g.p("\tif params == nil {")
	g.p("\t\tparams = &%sInput{}", n)
	g.p("\t}")
	g.p("\toptions := %sPaginatorOptions{}", n)
	g.p("\tif params.%s != nil {", size)
	g.p("\t\toptions.Limit = *params.%s", size)
	g.p("\t}")
	g.p("\tfor _, fn := range optFns {")
	g.p("\t\tfn(&options)")
	g.p("\t}")
	g.p("\treturn &%sPaginator{options: options, client: client, params: params, firstPage: true, nextToken: params.%s}", n, in)
	g.p("}")
	g.p("")
	g.p("// HasMorePages returns a boolean indicating whether more pages are available")
	g.p("func (p *%sPaginator) HasMorePages() bool {", n)
	g.p("\treturn p.firstPage || (p.nextToken != nil && len(*p.nextToken) != 0)")
	g.p("}")
	g.p("")
	g.p("// NextPage retrieves the next %s page.", n)
	g.p("func (p *%sPaginator) NextPage(ctx context.Context, optFns ...func(*Options)) (*%sOutput, error) {", n, n)
	g.p("\tif !p.HasMorePages() {")
	g.p("\t\treturn nil, fmt.Errorf(\"no more pages available\")")
	g.p("\t}")
	g.p("\tparams := *p.params")
	g.p("\tparams.%s = p.nextToken", in)
	g.p("\tvar limit *int32")
	g.p("\tif p.options.Limit > 0 {")
	g.p("\t\tlimit = &p.options.Limit")
	g.p("\t}")
	g.p("\tparams.%s = limit", size)
	g.p("\tresult, err := p.client.%s(ctx, &params, optFns...)", n)
	g.p("\tif err != nil {")
	g.p("\t\treturn nil, err")
	g.p("\t}")
	g.p("\tp.firstPage = false")
	g.p("\tprevToken := p.nextToken")
	g.p("\tp.nextToken = result.%s", out)
	g.p("\tif p.options.StopOnDuplicateToken && prevToken != nil && p.nextToken != nil && *prevToken == *p.nextToken {")
	g.p("\t\tp.nextToken = nil")
	g.p("\t}")
	g.p("\treturn result, nil")
	g.p("}")
	g.p("")
}

func (g *sdkGen) waiter(op *sdkOp, w sdkWaiter) {
	n := w.Name
	lower := strings.ToLower(n[:1]) + n[1:]
	path := g.member(op.Output, w.Path).GoName
	g.p("// %sWaiterOptions are waiter options for %sWaiter", n, n)
	g.p("type %sWaiterOptions struct {", n)
	g.p("\t// Set of options to modify how an operation is invoked. These apply to all")
	g.p("\t// operations invoked for this client. Use functional options on operation call")
	g.p("\t// to modify this list for per operation behavior.")
	g.p("\tAPIOptions []func(*middleware.Stack) error")
	g.p("")
	g.p("\t// Functional options to be passed to all operations invoked by this client.")
	g.p("\tClientOptions []func(*Options)")
	g.p("")
	g.p("\t// MinDelay is the minimum amount of time to delay between retries. If unset,")
	g.p("\t// %sWaiter will use default minimum delay of %d seconds. The first poll", n, w.MinDelay)
	g.p("\t// is never delayed.")
	g.p("\tMinDelay time.Duration")
	g.p("")
	g.p("\t// MaxDelay is the maximum amount of time to delay between retries. If unset")
	g.p("\t// or set to zero, %sWaiter will use default max delay of %d seconds.", n, w.MaxDelay)
	g.p("\tMaxDelay time.Duration")
	g.p("")
	g.p("\t// LogWaitAttempts is used to enable logging for waiter retry attempts")
	g.p("\tLogWaitAttempts bool")
	g.p("")
	g.p("\t// Retryable is function that can be used to override the service defined")
	g.p("\t// waiter-behavior based on operation output, or returned error. This function is")
	g.p("\t// used by the waiter to decide if a state is retryable or a terminal state.")
	g.p("\tRetryable func(context.Context, *%sInput, *%sOutput, error) (bool, error)", op.Name, op.Name)
	g.p("}")
	g.p("")
	g.comment("", fmt.Sprintf("%sWaiter defines the waiters for %s. %s", n, n, w.Doc))
	g.p("type %sWaiter struct {", n)
	g.p("\tclient %sAPIClient", op.Name)
	g.p("\toptions %sWaiterOptions", n)
	g.p("}")
	g.p("")
	g.p("// New%sWaiter constructs a %sWaiter.", n, n)
	g.p("func New%sWaiter(client %sAPIClient, optFns ...func(*%sWaiterOptions)) *%sWaiter {", n, op.Name, n, n)
	g.p("\toptions := %sWaiterOptions{}", n)
	g.p("\toptions.MinDelay = %d * time.Second", w.MinDelay)
	g.p("\toptions.MaxDelay = %d * time.Second", w.MaxDelay)
	g.p("\toptions.Retryable = %sStateRetryable", lower)
	g.p("")
	g.p("\tfor _, fn := range optFns {")
	g.p("\t\tfn(&options)")
	g.p("\t}")
	g.p("\treturn &%sWaiter{client: client, options: options}", n)
	g.p("}")
	g.p("")
	g.p("// Wait calls the waiter function for %s waiter. The maxWaitDur is the maximum", n)
	g.p("// wait duration the waiter will wait. The maxWaitDur is required and must be")
	g.p("// greater than zero.")
	g.p("func (w *%sWaiter) Wait(ctx context.Context, params *%sInput, maxWaitDur time.Duration, optFns ...func(*%sWaiterOptions)) error {", n, op.Name, n)
	g.p("\t_, err := w.WaitForOutput(ctx, params, maxWaitDur, optFns...)")
	g.p("\treturn err")
	g.p("}")
	g.p("")
	g.p("// WaitForOutput calls the waiter function for %s waiter and returns the output", n)
	g.p("// of the successful operation. The maxWaitDur is the maximum wait duration the")
	g.p("// waiter will wait. The maxWaitDur is required and must be greater than zero.")
	g.p("func (w *%sWaiter) WaitForOutput(ctx context.Context, params *%sInput, maxWaitDur time.Duration, optFns ...func(*%sWaiterOptions)) (*%sOutput, error) {", n, op.Name, n, op.Name)
	g.p("\tif maxWaitDur <= 0 {")
	g.p("\t\treturn nil, fmt.Errorf(\"maximum wait time for waiter must be greater than zero\")")
	g.p("\t}")
	g.p("\toptions := w.options")
	g.p("\tfor _, fn := range optFns {")
	g.p("\t\tfn(&options)")
	g.p("\t}")
	g.p("\tif options.MaxDelay <= 0 {")
	g.p("\t\toptions.MaxDelay = %d * time.Second", w.MaxDelay)
	g.p("\t}")
	g.p("\tif options.MinDelay <= 0 || options.MinDelay > options.MaxDelay {")
	g.p("\t\treturn nil, fmt.Errorf(\"minimum waiter delay %%v must be greater than zero and at most the maximum waiter delay of %%v\", options.MinDelay, options.MaxDelay)")
	g.p("\t}")
	g.p("\treturn waitFor(ctx, %q, maxWaitDur, options.MinDelay, options.MaxDelay, options.LogWaitAttempts, options.APIOptions, func(ctx context.Context, apiOptions []func(*middleware.Stack) error) (*%sOutput, bool, error) {", n, op.Name)
	g.p("\t\tout, err := w.client.%s(ctx, params, func(o *Options) {", op.Name)
	g.p("\t\t\to.APIOptions = append(o.APIOptions, apiOptions...)")
	g.p("\t\t\tfor _, opt := range options.ClientOptions {")
	g.p("\t\t\t\topt(o)")
	g.p("\t\t\t}")
	g.p("\t\t})")
	g.p("\t\tretryable, err := options.Retryable(ctx, params, out, err)")
	g.p("\t\treturn out, retryable, err")
	g.p("\t})")
	g.p("}")
	g.p("")
	g.p("// %sStateRetryable applies the %s acceptors in order: the first that", lower, n)
	g.p("// matches decides; an output no acceptor matches is polled again, and an error")
	g.p("// no acceptor matches ends the wait.")
	g.p("func %sStateRetryable(ctx context.Context, input *%sInput, output *%sOutput, err error) (bool, error) {", lower, op.Name, op.Name)
	for _, a := range w.Acceptors {
		var cond string
		if a.Error != "" {
			cond = fmt.Sprintf("err != nil && errorCodeIs(err, %q)", a.Error)
		} else {
			cond = fmt.Sprintf("err == nil && output != nil && string(output.%s) == %q", path, a.Expected)
		}
		g.p("\tif %s {", cond)
		switch a.State {
		case "success":
			g.p("\t\treturn false, nil")
		case "retry":
			g.p("\t\treturn true, nil")
		case "failure":
			if a.Error != "" {
				g.p("\t\treturn false, &WaiterFailureError{Waiter: %q, State: %q, Err: err}", n, a.Error)
			} else {
				reason := "nil"
				if w.ReasonPath != "" {
					reason = "output." + g.member(op.Output, w.ReasonPath).GoName
				}
				g.p("\t\treturn false, &WaiterFailureError{Waiter: %q, State: string(output.%s), Reason: %s}", n, path, reason)
			}
		default:
			panic("acceptor state " + a.State)
		}
		g.p("\t}")
	}
	g.p("\tif err != nil {")
	g.p("\t\treturn false, err")
	g.p("\t}")
	g.p("\treturn true, nil")
	g.p("}")
	g.p("")
}

// ---- serializers.go ----------------------------------------------------------

func (g *sdkGen) serializers() string {
	g.p("import (")
	for _, imp := range []string{"bytes", "context", "fmt", "sort"} {
		g.p("\t%q", imp)
	}
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p("\tsmithyjson %q", "github.com/aws/smithy-go/encoding/json")
	g.p("\t%q", "github.com/aws/smithy-go/encoding/httpbinding")
	g.p("\t%q", "github.com/aws/smithy-go/middleware")
	g.p("\tsmithytime %q", "github.com/aws/smithy-go/time")
	g.p("\tsmithyhttp %q", "github.com/aws/smithy-go/transport/http")
	g.p("\t%q", "github.com/microvms/microvms/client/lambdamicrovms/types")
	g.p(")")
	g.p("")
	for _, op := range g.m.Ops {
		n := op.Name
		g.p("type awsRestjson1_serializeOp%s struct{}", n)
		g.p("")
		g.p("func (*awsRestjson1_serializeOp%s) ID() string { return \"OperationSerializer\" }", n)
		g.p("")
		g.p("func (m *awsRestjson1_serializeOp%s) HandleSerialize(ctx context.Context, in middleware.SerializeInput, next middleware.SerializeHandler) (out middleware.SerializeOutput, metadata middleware.Metadata, err error) {", n)
		g.p("\trequest, ok := in.Request.(*smithyhttp.Request)")
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: fmt.Errorf(\"unknown transport type %%T\", in.Request)}")
		g.p("\t}")
		g.p("\tinput, ok := in.Parameters.(*%sInput)", n)
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: fmt.Errorf(\"unknown input parameters type %%T\", in.Parameters)}")
		g.p("\t}")
		g.p("\t_ = input")
		g.p("\topPath, opQuery := httpbinding.SplitURI(%q)", op.Path)
		g.p("\trequest.URL.Path = smithyhttp.JoinPath(request.URL.Path, opPath)")
		g.p("\trequest.URL.RawQuery = smithyhttp.JoinRawQuery(request.URL.RawQuery, opQuery)")
		g.p("\trequest.Method = %q", op.Method)
		g.p("\tvar restEncoder *httpbinding.Encoder")
		g.p("\tif request.URL.RawPath == \"\" {")
		g.p("\t\trestEncoder, err = httpbinding.NewEncoder(request.URL.Path, request.URL.RawQuery, request.Header)")
		g.p("\t} else {")
		g.p("\t\trequest.URL.RawPath = smithyhttp.JoinPath(request.URL.RawPath, opPath)")
		g.p("\t\trestEncoder, err = httpbinding.NewEncoderWithRawPath(request.URL.Path, request.URL.RawPath, request.URL.RawQuery, request.Header)")
		g.p("\t}")
		g.p("\tif err != nil {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
		g.p("\t}")
		for _, mem := range op.Input.Members {
			g.bindMember(mem)
		}
		if op.HasBody {
			g.p("\trestEncoder.SetHeader(\"Content-Type\").String(\"application/json\")")
			g.p("\tjsonEncoder := smithyjson.NewEncoder()")
			g.p("\tif err := awsRestjson1_serializeOpDocument%sInput(ctx, input, jsonEncoder.Value); err != nil {", n)
			g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
			g.p("\t}")
			g.p("\tif request, err = request.SetStream(bytes.NewReader(jsonEncoder.Bytes())); err != nil {")
			g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
			g.p("\t}")
		}
		g.p("\tif request.Request, err = restEncoder.Encode(request.Request); err != nil {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
		g.p("\t}")
		g.p("\tin.Request = request")
		g.p("\treturn next.HandleSerialize(ctx, in)")
		g.p("}")
		g.p("")
		if op.HasBody {
			g.p("func awsRestjson1_serializeOpDocument%sInput(ctx context.Context, v *%sInput, value smithyjson.Value) error {", n, n)
			g.p("\tobject := value.Object()")
			g.p("\tdefer object.Close()")
			g.p("\t_ = ctx")
			members := op.Input.Members
			if op.Token != nil {
				members = append(append([]*sdkMember{}, members...), op.Token)
			}
			for _, mem := range members {
				if mem.Loc != "body" {
					continue
				}
				if mem.Token {
					g.p("\tif token := clientTokenFrom(ctx); token != \"\" {")
					g.p("\t\tobject.Key(%q).String(token)", mem.Wire)
					g.p("\t}")
					continue
				}
				g.serializeMember("v", mem, "types.")
			}
			g.p("\treturn nil")
			g.p("}")
			g.p("")
		}
	}
	for _, st := range g.m.Types {
		if st.Union {
			g.p("func awsRestjson1_serializeDocument%s(v types.%s, value smithyjson.Value) error {", st.Name, st.Name)
			g.p("\tobject := value.Object()")
			g.p("\tdefer object.Close()")
			g.p("\tswitch uv := v.(type) {")
			for _, mem := range st.Members {
				g.p("\tcase *types.%sMember%s:", st.Name, mem.GoName)
				g.p("\t\tav := object.Key(%q)", mem.Wire)
				g.serializeValue("uv.Value", mem.T, "av", 2, "types.", false)
			}
			g.p("\tdefault:")
			g.p("\t\treturn fmt.Errorf(\"attempted to serialize unknown member type %%T for union %%T\", uv, v)")
			g.p("\t}")
			g.p("\treturn nil")
			g.p("}")
			g.p("")
			continue
		}
		g.p("func awsRestjson1_serializeDocument%s(v *types.%s, value smithyjson.Value) error {", st.Name, st.Name)
		g.p("\tobject := value.Object()")
		g.p("\tdefer object.Close()")
		for _, mem := range st.Members {
			g.serializeMember("v", mem, "types.")
		}
		g.p("\treturn nil")
		g.p("}")
		g.p("")
	}
	return g.take()
}

// bindMember writes an HTTP-bound (path or query) input member.
func (g *sdkGen) bindMember(mem *sdkMember) {
	t := g.resolve(mem.T)
	f := "input." + mem.GoName
	switch mem.Loc {
	case "uri":
		if t.Kind != "string" {
			panic("non-string label " + mem.Wire)
		}
		g.p("\tif %s == nil || len(*%s) == 0 {", f, f)
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: smithy.NewErrParamRequired(%q)}", mem.GoName)
		g.p("\t}")
		g.p("\tif err := restEncoder.SetURI(%q).String(*%s); err != nil {", mem.Wire, f)
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
		g.p("\t}")
	case "query":
		switch t.Kind {
		case "string":
			g.p("\tif %s != nil {", f)
			g.p("\t\trestEncoder.SetQuery(%q).String(*%s)", mem.Wire, f)
			g.p("\t}")
		case "int32":
			g.p("\tif %s != nil {", f)
			g.p("\t\trestEncoder.SetQuery(%q).Integer(*%s)", mem.Wire, f)
			g.p("\t}")
		case "enum":
			g.p("\tif len(%s) > 0 {", f)
			g.p("\t\trestEncoder.SetQuery(%q).String(string(%s))", mem.Wire, f)
			g.p("\t}")
		case "list":
			g.p("\tfor i := range %s {", f)
			g.p("\t\trestEncoder.AddQuery(%q).String(%s[i])", mem.Wire, f)
			g.p("\t}")
		default:
			panic("query kind " + t.Kind)
		}
	}
}

// serializeMember writes one member of a structure under its JSON key.
func (g *sdkGen) serializeMember(recv string, mem *sdkMember, pkg string) {
	t := g.resolve(mem.T)
	f := recv + "." + mem.GoName
	switch t.Kind {
	case "enum":
		g.p("\tif len(%s) > 0 {", f)
	default:
		g.p("\tif %s != nil {", f)
	}
	g.p("\t\tok := object.Key(%q)", mem.Wire)
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp":
		g.serializeValue("*"+f, t, "ok", 2, pkg, false)
	case "struct":
		g.serializeValue(f, t, "ok", 2, pkg, true)
	default:
		g.serializeValue(f, t, "ok", 2, pkg, false)
	}
	g.p("\t}")
}

// serializeValue writes expr (of type t) into the smithyjson.Value named val.
// isPtr says a structure expr is already a pointer.
func (g *sdkGen) serializeValue(expr string, t *sdkType, val string, depth int, pkg string, isPtr bool) {
	t = g.resolve(t)
	ind := strings.Repeat("\t", depth)
	switch t.Kind {
	case "string":
		g.p("%s%s.String(%s)", ind, val, expr)
	case "int32":
		g.p("%s%s.Integer(%s)", ind, val, expr)
	case "int64":
		g.p("%s%s.Long(%s)", ind, val, expr)
	case "bool":
		g.p("%s%s.Boolean(%s)", ind, val, expr)
	case "double":
		g.p("%s%s.Double(%s)", ind, val, expr)
	case "timestamp":
		g.p("%s%s.Double(smithytime.FormatEpochSeconds(%s))", ind, val, expr)
	case "enum":
		g.p("%s%s.String(string(%s))", ind, val, expr)
	case "struct":
		if !isPtr {
			expr = "&" + expr
		}
		g.p("%sif err := awsRestjson1_serializeDocument%s(%s, %s); err != nil {", ind, t.Name, expr, val)
		g.p("%s\treturn err", ind)
		g.p("%s}", ind)
	case "union":
		g.p("%sif err := awsRestjson1_serializeDocument%s(%s, %s); err != nil {", ind, t.Name, expr, val)
		g.p("%s\treturn err", ind)
		g.p("%s}", ind)
	case "list":
		arr := fmt.Sprintf("a%d", depth)
		idx := fmt.Sprintf("i%d", depth)
		g.p("%s%s := %s.Array()", ind, arr, val)
		g.p("%sfor %s := range %s {", ind, idx, expr)
		item := fmt.Sprintf("e%d", depth)
		g.p("%s\t%s := %s.Value()", ind, item, arr)
		g.serializeValue(expr+"["+idx+"]", t.Elem, item, depth+1, pkg, false)
		g.p("%s}", ind)
		g.p("%s%s.Close()", ind, arr)
	case "map":
		obj := fmt.Sprintf("o%d", depth)
		keys := fmt.Sprintf("k%d", depth)
		g.p("%s%s := %s.Object()", ind, obj, val)
		g.p("%s%s := make([]string, 0, len(%s))", ind, keys, expr)
		g.p("%sfor k := range %s {", ind, expr)
		g.p("%s\t%s = append(%s, k)", ind, keys, keys)
		g.p("%s}", ind)
		g.p("%ssort.Strings(%s)", ind, keys)
		g.p("%sfor _, k := range %s {", ind, keys)
		item := fmt.Sprintf("e%d", depth)
		g.p("%s\t%s := %s.Key(k)", ind, item, obj)
		g.serializeValue(expr+"[k]", t.Elem, item, depth+1, pkg, false)
		g.p("%s}", ind)
		g.p("%s%s.Close()", ind, obj)
	default:
		panic("serialize kind " + t.Kind)
	}
}

// ---- deserializers.go ----------------------------------------------------------

func (g *sdkGen) deserializers() string {
	g.p("import (")
	for _, imp := range []string{"context", "fmt", "strings"} {
		g.p("\t%q", imp)
	}
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p("\t%q", "github.com/aws/smithy-go/middleware")
	g.p("\tsmithyhttp %q", "github.com/aws/smithy-go/transport/http")
	g.p("\t%q", "github.com/microvms/microvms/client/lambdamicrovms/types")
	g.p(")")
	g.p("")
	for _, op := range g.m.Ops {
		n := op.Name
		g.p("type awsRestjson1_deserializeOp%s struct{}", n)
		g.p("")
		g.p("func (*awsRestjson1_deserializeOp%s) ID() string { return \"OperationDeserializer\" }", n)
		g.p("")
		g.p("func (m *awsRestjson1_deserializeOp%s) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (out middleware.DeserializeOutput, metadata middleware.Metadata, err error) {", n)
		g.p("\tout, metadata, err = next.HandleDeserialize(ctx, in)")
		g.p("\tif err != nil {")
		g.p("\t\treturn out, metadata, err")
		g.p("\t}")
		g.p("\tresponse, ok := out.RawResponse.(*smithyhttp.Response)")
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, &smithy.DeserializationError{Err: fmt.Errorf(\"unknown transport type %%T\", out.RawResponse)}")
		g.p("\t}")
		g.p("\tdefer func() {")
		g.p("\t\tsmithyhttp.CloseResponseBody(ctx, response, false, err)")
		g.p("\t}()")
		g.p("\tif response.StatusCode < 200 || response.StatusCode >= 300 {")
		g.p("\t\treturn out, metadata, awsRestjson1_deserializeOpError%s(response)", n)
		g.p("\t}")
		g.p("\toutput := &%sOutput{}", n)
		g.p("\tout.Result = output")
		g.p("\tbody, err := readJSONObject(response)")
		g.p("\tif err != nil {")
		g.p("\t\treturn out, metadata, err")
		g.p("\t}")
		g.p("\t_ = body")
		for _, mem := range op.Output.Members {
			g.decodeMember("output", mem, "body", "types.", "return out, metadata, &smithy.DeserializationError{Err: err}")
		}
		g.p("\treturn out, metadata, nil")
		g.p("}")
		g.p("")
		g.p("func awsRestjson1_deserializeOpError%s(response *smithyhttp.Response) error {", n)
		g.p("\tenv := readErrorEnvelope(response)")
		g.p("\tswitch {")
		for _, e := range op.Errors {
			g.p("\tcase strings.EqualFold(%q, env.code):", e)
			g.p("\t\treturn awsRestjson1_deserializeError%s(response, env)", e)
		}
		g.p("\tdefault:")
		g.p("\t\treturn genericAPIError(response, env)")
		g.p("\t}")
		g.p("}")
		g.p("")
	}
	for _, e := range g.m.Errors {
		g.p("func awsRestjson1_deserializeError%s(response *smithyhttp.Response, env errorEnvelope) error {", e.Name)
		g.p("\toutput := &types.%s{}", e.Name)
		g.p("\tbody := env.body")
		g.p("\t_ = body")
		for _, mem := range e.Members {
			if mem.Loc == "header" {
				g.p("\tif v, err := headerInt32(response, %q); err != nil {", mem.Wire)
				g.p("\t\treturn err")
				g.p("\t} else {")
				g.p("\t\toutput.%s = v", mem.GoName)
				g.p("\t}")
				continue
			}
			if mem.Wire == "message" {
				g.p("\toutput.Message = env.message")
				continue
			}
			g.decodeMember("output", mem, "body", "types.", "return &smithy.DeserializationError{Err: err}")
		}
		g.p("\treturn output")
		g.p("}")
		g.p("")
	}
	for _, st := range g.m.Types {
		if st.Union {
			g.p("func awsRestjson1_deserializeDocument%s(value any) (types.%s, error) {", st.Name, st.Name)
			g.p("\tbody, err := asObject(value)")
			g.p("\tif err != nil || body == nil {")
			g.p("\t\treturn nil, err")
			g.p("\t}")
			g.p("\tfor key, val := range body {")
			g.p("\t\tif val == nil {")
			g.p("\t\t\tcontinue")
			g.p("\t\t}")
			g.p("\t\tswitch key {")
			for _, mem := range st.Members {
				g.p("\t\tcase %q:", mem.Wire)
				g.p("\t\t\tv, err := %s", g.decodeElem(mem.T, "val", "types."))
				g.p("\t\t\tif err != nil {")
				g.p("\t\t\t\treturn nil, err")
				g.p("\t\t\t}")
				g.p("\t\t\treturn &types.%sMember%s{Value: v}, nil", st.Name, mem.GoName)
			}
			g.p("\t\tdefault:")
			g.p("\t\t\treturn &types.UnknownUnionMember{Tag: key, Value: rawJSON(val)}, nil")
			g.p("\t\t}")
			g.p("\t}")
			g.p("\treturn nil, nil")
			g.p("}")
			g.p("")
			continue
		}
		g.p("func awsRestjson1_deserializeDocument%s(value any) (*types.%s, error) {", st.Name, st.Name)
		g.p("\tbody, err := asObject(value)")
		g.p("\tif err != nil || body == nil {")
		g.p("\t\treturn nil, err")
		g.p("\t}")
		g.p("\toutput := &types.%s{}", st.Name)
		for _, mem := range st.Members {
			g.decodeMember("output", mem, "body", "types.", "return nil, err")
		}
		g.p("\treturn output, nil")
		g.p("}")
		g.p("")
	}
	return g.take()
}

// decodeMember assigns recv.GoName from the JSON object body.
func (g *sdkGen) decodeMember(recv string, mem *sdkMember, body, pkg, ret string) {
	t := g.resolve(mem.T)
	g.p("\tif val, ok := %s[%q]; ok && val != nil {", body, mem.Wire)
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp":
		g.p("\t\tv, err := %s", g.decodeElem(t, "val", pkg))
		g.p("\t\tif err != nil {")
		g.p("\t\t\t%s", ret)
		g.p("\t\t}")
		g.p("\t\t%s.%s = &v", recv, mem.GoName)
	case "struct":
		g.p("\t\tv, err := awsRestjson1_deserializeDocument%s(val)", t.Name)
		g.p("\t\tif err != nil {")
		g.p("\t\t\t%s", ret)
		g.p("\t\t}")
		g.p("\t\t%s.%s = v", recv, mem.GoName)
	default:
		g.p("\t\tv, err := %s", g.decodeElem(t, "val", pkg))
		g.p("\t\tif err != nil {")
		g.p("\t\t\t%s", ret)
		g.p("\t\t}")
		g.p("\t\t%s.%s = v", recv, mem.GoName)
	}
	g.p("\t}")
}

// decodeElem is an expression of type (elemType(t), error) decoding expr.
func (g *sdkGen) decodeElem(t *sdkType, expr, pkg string) string {
	t = g.resolve(t)
	switch t.Kind {
	case "string":
		return "decString(" + expr + ")"
	case "int32":
		return "decInt32(" + expr + ")"
	case "int64":
		return "decInt64(" + expr + ")"
	case "bool":
		return "decBool(" + expr + ")"
	case "double":
		return "decDouble(" + expr + ")"
	case "timestamp":
		return "decTime(" + expr + ")"
	case "enum":
		return fmt.Sprintf("decEnum[%s%s](%s)", pkg, t.Name, expr)
	case "union":
		return fmt.Sprintf("awsRestjson1_deserializeDocument%s(%s)", t.Name, expr)
	case "struct":
		return fmt.Sprintf("decValue(awsRestjson1_deserializeDocument%s(%s))", t.Name, expr)
	case "list":
		return fmt.Sprintf("decList(%s, func(v any) (%s, error) { return %s })", expr, g.elemType(t.Elem, pkg), g.decodeElem(t.Elem, "v", pkg))
	case "map":
		return fmt.Sprintf("decMap(%s, func(v any) (%s, error) { return %s })", expr, g.elemType(t.Elem, pkg), g.decodeElem(t.Elem, "v", pkg))
	}
	panic("decode kind " + t.Kind)
}

// ---- validators.go -------------------------------------------------------------

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
