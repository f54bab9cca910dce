package main

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/taxonomy"
)

// app is one invocation: its I/O and output mode, and what the failure
// path needs to know to explain a failure and name its fix.
type app struct {
	render.IO
	parser *kong.Kong
	// command is the selected command's name (exec, cp...), for hints that
	// differ by command: a 404 is a path to cp and an exec id to ack.
	command string
	// attached is set once a command addresses a VM it did not launch: an
	// interrupt then leaves the VM and the exec as they were, which is the
	// timeout row's meaning, not the interrupted row's (teardown ran).
	attached bool
	// unreachable is set when fail reclassed a refused connection.
	unreachable bool
	// vmStatus is the attached MicroVM's state when a failure at its
	// endpoint was explained by it (hints.go); status reads it.
	vmStatus *sandbox.Status
	status   func(context.Context) (sandbox.Status, error)
	// awsWithoutCredentials is set when a command bound for AWS itself (no
	// control endpoint, no --local) found no credentials at all.
	awsWithoutCredentials bool
}

// fail writes the failure envelope (or its human form) and returns the exit
// code, which is the error kind's row of the generated table and nothing else.
func (a *app) fail(err error) int {
	ce := asClientError(err)
	if wire, _ := ce.WireKind(); a.attached && wire == taxonomy.WireTransport && nothingListens(ce) {
		// The client retried and gave up: nothing listens at the endpoint
		// (connection refused) or its name does not resolve. Running the
		// identical command again will not help until the endpoint is fixed
		// or the VM is up, so this is a missing prerequisite, not row 3.
		// data.kind still says Transport.
		ce = client.WireErrorf(taxonomy.WireTransport, "%s", ce.Error()).WithCause(ce)
		ce = client.Errorf(taxonomy.KindPrecondition, "", "nothing answers at the endpoint: %s", ce.Error()).WithCause(ce)
		a.unreachable = true
	}
	ce = a.diagnosed(ce)
	interrupted := false
	if a.attached && ce.Kind() == taxonomy.KindInterrupted {
		interrupted = true
		// ERR_INTERRUPTED means "after launch; teardown ran": an attached
		// command launched nothing and tears nothing down. Stopping its wait
		// is a client-side deadline the caller chose, and the exec (or the
		// file on the VM) is left as it was, which is ERR_TIMEOUT's row.
		ce = client.Errorf(taxonomy.KindTimeout, "", "interrupted: %s; nothing on the VM was stopped", ce.Error()).WithCause(ce)
	}
	var partial any
	var human func(io.Writer) error
	var extra []string
	var f *render.Failure
	if errors.As(err, &f) {
		partial, human, extra = f.Data, f.Human, f.Suggestions
	}
	env := render.FailureEnvelope(ce, partial)
	if m, ok := env.Data.(map[string]any); ok && a.unreachable {
		m["kind"] = taxonomy.WireTransport.String()
	}
	env.Suggestions = a.suggestionsFor(ce, interrupted)
	if len(extra) > 0 {
		env.Suggestions = append(append([]string{}, extra...), env.Suggestions...)
	}
	return a.WriteFailure(env, human)
}

// nothingListens reports a transport failure that retrying cannot fix:
// the connection was refused, or the host name does not resolve.
func nothingListens(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dns) && dns.IsNotFound)
}
