package schema

// The SDK generator's operation files: one api_op_<Name>.go per operation
// (input and output types, the middleware stack, paginators, waiters).

import (
	"fmt"
	"strings"
)

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
