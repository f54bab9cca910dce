package render

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/schollz/progressbar/v3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// IO is one invocation's I/O and output mode: where the envelope, the human
// form and the progress lines go, and which of them the caller asked for.
type IO struct {
	// JSON, Dense and Quiet are the global flags that choose the output.
	JSON, Dense, Quiet   bool
	Stdin                io.Reader
	Stdout, Stderr       io.Writer
	StdoutTTY, StderrTTY bool
	Env                  func(string) string
	// progressMu and bar keep a lifecycle command's progress lines from
	// tearing through its spinner (progress.go).
	progressMu sync.Mutex
	bar        *progressbar.ProgressBar
	// Streamed is set once exec --stream has written an NDJSON line: from
	// then on the envelope must be one compact line, and on the human path a
	// failure must stay off stdout, which holds the child's bytes.
	Streamed bool
}

// Result is a command's success: its envelope type and data, and how a
// human reads it.
type Result struct {
	Type  string
	Data  any
	Human func(w io.Writer) error // nil: the dense form
	Dense func(w io.Writer) error // nil: type and data flattened to one line
	// Written means the command already wrote its whole stdout (constants
	// --emit-json) and no envelope follows.
	Written bool
	// Exit is the code a success envelope still exits with: ERR_EXEC_FAILED
	// when the sandbox worked and the child exited non-zero, which the
	// reference CLI reports as status ok with the child's record. Zero
	// otherwise.
	Exit taxonomy.ExitCode
	// Note is the line a human reads on stderr when Exit is not zero.
	Note string
	// AlwaysJSON writes the envelope even without --json when stdout is
	// not a terminal (manifest: its only consumer parses it).
	AlwaysJSON bool
}

// Reporting marks a success that exits with kind's row: the child's record
// is the envelope's data, and the exit code says it did not pass.
func (r *Result) Reporting(kind taxonomy.ErrorKind, note string) *Result {
	r.Exit, r.Note = kind.Exit(), note
	return r
}

// Failure is an error that still carries a partial result: the data that goes
// into the failure envelope (an exec that exited non-zero keeps its output).
type Failure struct {
	Err   *client.Error
	Data  any
	Human func(w io.Writer) error
	// Suggestions go before the ones the error's kind implies: they name
	// this failure's own next step (the offset to resume a stream at).
	Suggestions []string
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Succeed writes the success envelope (or its human form) and returns 0,
// or the exit the result reports (ERR_EXEC_FAILED for a child that failed).
func (a *IO) Succeed(res *Result) int {
	switch {
	case res.Written:
	case a.JSON || (res.AlwaysJSON && !a.Dense && !a.StdoutTTY):
		a.WriteJSON(cliapi.Success{Status: cliapi.StatusOK, APIVersion: cliapi.APIVersion, Type: res.Type, Data: res.Data})
	case a.Dense:
		if res.Dense != nil {
			_ = res.Dense(a.Stdout)
		} else {
			fmt.Fprintln(a.Stdout, denseLine(res.Type, res.Data))
		}
	default:
		if res.Human != nil {
			_ = res.Human(a.Stdout)
		} else {
			fmt.Fprintln(a.Stdout, denseLine(res.Type, res.Data))
		}
	}
	if res.Exit != taxonomy.ExitSuccess && !a.JSON && res.Note != "" {
		// stdout may hold the child's bytes: the verdict goes to stderr.
		if a.Dense {
			fmt.Fprintf(a.Stderr, "exit=%d %s\n", res.Exit, res.Note)
		} else {
			fmt.Fprintf(a.Stderr, "microvm: %s\n", res.Note)
		}
	}
	return int(res.Exit)
}

// WriteFailure writes a failure envelope, or its human form (human, when
// given, writes the partial result to stdout first), and returns its exit
// code.
func (a *IO) WriteFailure(env cliapi.Failure, human func(io.Writer) error) int {
	switch {
	case a.JSON:
		a.WriteJSON(env)
	default:
		// Human and dense failures go to stderr: stdout may hold a child's
		// raw bytes, and an error line appended to them would corrupt a file
		// the caller redirected into.
		if human != nil {
			_ = human(a.Stdout)
		}
		if a.Dense {
			fmt.Fprintf(a.Stderr, "%s exit=%d %s\n", env.Code, env.ExitCode, env.Error)
		} else {
			fmt.Fprintf(a.Stderr, "microvm: %s: %s\n", env.Code, env.Error)
			for _, s := range env.Suggestions {
				fmt.Fprintf(a.Stderr, "  try: %s\n", s)
			}
		}
	}
	return int(env.ExitCode)
}

// FailureEnvelope builds the failure envelope with every key present.
func FailureEnvelope(ce *client.Error, partial any) cliapi.Failure {
	kind := ce.Kind()
	data := map[string]any{}
	if partial != nil {
		for k, v := range ToMap(partial) {
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

func (a *IO) WriteJSON(v any) {
	var b []byte
	var err error
	if a.Streamed {
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
	a.Stdout.Write(append(b, '\n'))
}

// Present is a shape's optional key: nil (absent from the JSON) for the
// empty string, as the key is omitted rather than written empty.
func Present(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ToMap turns a generated data struct into its JSON object.
func ToMap(v any) map[string]any {
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
	m := ToMap(data)
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
