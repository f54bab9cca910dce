package schema

// The SDK generator's operation files: one api_op_<Name>.go per operation
// (input and output types, the middleware stack, paginators, waiters), laid
// out by sdktmpl/api_op.go.tmpl from the view built here.

import (
	"fmt"
	"strings"
)

// opFileView is one api_op_<Name>.go.
type opFileView struct {
	Name      string
	Doc       []string
	Token     string     // the wire name of the idempotency token, if any
	Findings  [][]string // the comment lines of each measured note
	Input     []fieldView
	Output    []fieldView
	APIClient bool // a paginator or waiter needs the <Name>APIClient interface
	Paginator *paginatorView
	Waiters   []waiterView
}

// paginatorView names the members a paginator reads and writes.
type paginatorView struct {
	PageSize, OutputToken string // wire names, for its documentation
	In, Out, Size         string // Go fields: input token, output token, page size
}

// waiterView is one waiter and its acceptors, in the model's order.
type waiterView struct {
	Name, Lower        string // FooBar and fooBar
	Doc                []string
	MinDelay, MaxDelay int64
	Path               string // the output's Go field the acceptors compare
	Reason             string // the failure's Reason: an output field or nil
	Acceptors          []sdkAcceptor
}

func opView(m *sdkModel, op *sdkOp) opFileView {
	doc := op.Doc
	if doc == "" {
		doc = op.Name + " calls the " + op.Name + " operation."
	}
	v := opFileView{
		Name:      op.Name,
		Doc:       commentLines(doc),
		Input:     m.fields(op.Input.Members, "types."),
		Output:    m.fields(op.Output.Members, "types."),
		APIClient: op.Paginator != nil || len(op.Waiters) > 0,
	}
	if op.Token != nil {
		v.Token = op.Token.Wire
	}
	for i, f := range op.Finding {
		label, note, _ := strings.Cut(op.Note[i], "|")
		v.Findings = append(v.Findings, commentLines(fmt.Sprintf("%s (docs/PLATFORM.md, %s): %s", label, f, note)))
	}
	if pg := op.Paginator; pg != nil {
		v.Paginator = &paginatorView{
			PageSize:    pg.PageSize,
			OutputToken: pg.OutputToken,
			In:          member(op.Input, pg.InputToken).GoName,
			Out:         member(op.Output, pg.OutputToken).GoName,
			Size:        member(op.Input, pg.PageSize).GoName,
		}
	}
	for _, w := range op.Waiters {
		wv := waiterView{
			Name:      w.Name,
			Lower:     strings.ToLower(w.Name[:1]) + w.Name[1:],
			Doc:       commentLines(fmt.Sprintf("%sWaiter defines the waiters for %s. %s", w.Name, w.Name, w.Doc)),
			MinDelay:  w.MinDelay,
			MaxDelay:  w.MaxDelay,
			Path:      member(op.Output, w.Path).GoName,
			Reason:    "nil",
			Acceptors: w.Acceptors,
		}
		if w.ReasonPath != "" {
			wv.Reason = "output." + member(op.Output, w.ReasonPath).GoName
		}
		for _, a := range w.Acceptors {
			if a.State != "success" && a.State != "retry" && a.State != "failure" {
				panic("acceptor state " + a.State)
			}
		}
		v.Waiters = append(v.Waiters, wv)
	}
	return v
}

// member is st's member whose wire name is wire.
func member(st *sdkStruct, wire string) *sdkMember {
	for _, m := range st.Members {
		if m.Wire == wire {
			return m
		}
	}
	panic(st.Name + " has no member " + wire)
}
