package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/schollz/progressbar/v3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// app is one invocation's I/O and output mode.
type app struct {
	g                    Globals
	stdin                io.Reader
	stdout, stderr       io.Writer
	stdoutTTY, stderrTTY bool
	env                  func(string) string
	parser               *kong.Kong
	// command is the selected command's name (exec, cp...), for hints that
	// differ by command: a 404 is a path to cp and an exec id to ack.
	command string
	// progressMu and bar keep a lifecycle command's progress lines from
	// tearing through its spinner (progress.go).
	progressMu sync.Mutex
	bar        *progressbar.ProgressBar
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
	// streamed is set once exec --stream has written an NDJSON line: from
	// then on the envelope must be one compact line, and on the human path a
	// failure must stay off stdout, which holds the child's bytes.
	streamed bool
}

// result is a command's success: its envelope type and data, and how a
// human reads it.
type result struct {
	typ   string
	data  any
	human func(w io.Writer) error // nil: the dense form
	dense func(w io.Writer) error // nil: type and data flattened to one line
	// written means the command already wrote its whole stdout (constants
	// --emit-json) and no envelope follows.
	written bool
	// exit is the code a success envelope still exits with: ERR_EXEC_FAILED
	// when the sandbox worked and the child exited non-zero, which the
	// reference CLI reports as status ok with the child's record. Zero
	// otherwise.
	exit taxonomy.ExitCode
	// note is the line a human reads on stderr when exit is not zero.
	note string
	// alwaysJSON writes the envelope even without --json when stdout is
	// not a terminal (manifest: its only consumer parses it).
	alwaysJSON bool
}

// reporting marks a success that exits with kind's row: the child's record
// is the envelope's data, and the exit code says it did not pass.
func (r *result) reporting(kind taxonomy.ErrorKind, note string) *result {
	r.exit, r.note = kind.Exit(), note
	return r
}

// failure is an error that still carries a partial result: the data that goes
// into the failure envelope (an exec that exited non-zero keeps its output).
type failure struct {
	err   *client.Error
	data  any
	human func(w io.Writer) error
	// suggestions go before the ones the error's kind implies: they name
	// this failure's own next step (the offset to resume a stream at).
	suggestions []string
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// succeed writes the success envelope (or its human form) and returns 0,
// or the exit the result reports (ERR_EXEC_FAILED for a child that failed).
func (a *app) succeed(res *result) int {
	switch {
	case res.written:
	case a.g.JSON || (res.alwaysJSON && !a.g.Dense && !a.stdoutTTY):
		a.writeJSON(cliapi.Success{Status: cliapi.StatusOK, APIVersion: cliapi.APIVersion, Type: res.typ, Data: res.data})
	case a.g.Dense:
		if res.dense != nil {
			_ = res.dense(a.stdout)
		} else {
			fmt.Fprintln(a.stdout, denseLine(res.typ, res.data))
		}
	default:
		if res.human != nil {
			_ = res.human(a.stdout)
		} else {
			fmt.Fprintln(a.stdout, denseLine(res.typ, res.data))
		}
	}
	if res.exit != taxonomy.ExitSuccess && !a.g.JSON && res.note != "" {
		// stdout may hold the child's bytes: the verdict goes to stderr.
		if a.g.Dense {
			fmt.Fprintf(a.stderr, "exit=%d %s\n", res.exit, res.note)
		} else {
			fmt.Fprintf(a.stderr, "microvm: %s\n", res.note)
		}
	}
	return int(res.exit)
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
	var f *failure
	if errors.As(err, &f) {
		partial, human, extra = f.data, f.human, f.suggestions
	}
	env := envelopeFor(ce, partial)
	if m, ok := env.Data.(map[string]any); ok && a.unreachable {
		m["kind"] = taxonomy.WireTransport.String()
	}
	env.Suggestions = a.suggestionsFor(ce, interrupted)
	if len(extra) > 0 {
		env.Suggestions = append(append([]string{}, extra...), env.Suggestions...)
	}
	switch {
	case a.g.JSON:
		a.writeJSON(env)
	default:
		// Human and dense failures go to stderr: stdout may hold a child's
		// raw bytes, and an error line appended to them would corrupt a file
		// the caller redirected into.
		if human != nil {
			_ = human(a.stdout)
		}
		if a.g.Dense {
			fmt.Fprintf(a.stderr, "%s exit=%d %s\n", env.Code, env.ExitCode, env.Error)
		} else {
			fmt.Fprintf(a.stderr, "microvm: %s: %s\n", env.Code, env.Error)
			for _, s := range env.Suggestions {
				fmt.Fprintf(a.stderr, "  try: %s\n", s)
			}
		}
	}
	return int(env.ExitCode)
}

// envelopeFor builds the failure envelope with every key present.
func envelopeFor(ce *client.Error, partial any) cliapi.Failure {
	kind := ce.Kind()
	data := map[string]any{}
	if partial != nil {
		for k, v := range toMap(partial) {
			data[k] = v
		}
	}
	// data.kind only when the daemon answered: a local refusal never reached
	// it, so naming a wire kind there would claim a round trip that did not
	// happen.
	if wire, ok := ce.WireKind(); ok {
		data["kind"] = wire.String()
	}
	finding := ce.Finding()
	if finding == "" {
		finding = kind.Finding()
	}
	return cliapi.Failure{
		Status:     cliapi.StatusError,
		APIVersion: cliapi.APIVersion,
		Error:      ce.Error(),
		Code:       kind.Code(),
		ExitCode:   int64(kind.Exit()),
		// The reference writes the finding's heading; the slug rides beside
		// it for a consumer that wants a stable key.
		Finding:     finding.Title(),
		FindingSlug: string(finding),
		Suggestions: []string{},
		Data:        data,
	}
}

// nothingListens reports a transport failure that retrying cannot fix:
// the connection was refused, or the host name does not resolve.
func nothingListens(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dns) && dns.IsNotFound)
}

func (a *app) writeJSON(v any) {
	var b []byte
	var err error
	if a.streamed {
		// After NDJSON lines, "the last line is the envelope" only holds if
		// the envelope is one line.
		b, err = json.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		b = []byte(fmt.Sprintf(`{"status":"error","apiVersion":%q,"error":%q,"code":%q,"exitCode":%d,"finding":"","findingSlug":"","suggestions":[],"data":{}}`,
			cliapi.APIVersion, "encoding the envelope: "+err.Error(), taxonomy.KindUnexpected.Code(), taxonomy.KindUnexpected.Exit()))
	}
	a.stdout.Write(append(b, '\n'))
}

// present is a shape's optional key: nil (absent from the JSON) for the
// empty string, as the key is omitted rather than written empty.
func present(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// toMap turns a generated data struct into its JSON object.
func toMap(v any) map[string]any {
	if m, ok := v.(map[string]any); ok {
		return m
	}
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		return map[string]any{}
	}
	return m
}

// denseLine is the token-lean form: the type, then key=value pairs with
// scalars bare and anything nested as compact JSON.
func denseLine(typ string, data any) string {
	m := toMap(data)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{typ}
	for _, k := range keys {
		var v string
		switch x := m[k].(type) {
		case string:
			v = strings.ReplaceAll(x, "\n", `\n`)
		case nil:
			v = "null"
		default:
			b, _ := json.Marshal(x)
			v = string(b)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}
