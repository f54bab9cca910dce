package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/microvms/microvms/localvm"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// bin is the real microvm binary, built once; every test spawns it, so what
// is tested is what ships (flag parsing, exit status, stdout bytes).
var bin string

var envelopeSchema, eventSchema *jsonschema.Schema

func TestMain(m *testing.M) {
	localvm.Init() // this test binary is also every local guest's init
	dir, err := os.MkdirTemp("", "microvm-cli-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "microvm")
	if err := setUpCover(dir); err != nil {
		panic(err)
	}
	build := append(append([]string{"build"}, coverBuildArgs()...), "-o", bin, ".")
	if out, err := exec.Command("go", build...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building microvm: %v\n%s", err, out)
		os.Exit(1)
	}
	// The generated schema on disk is what consumers get; compiling it here
	// (rather than the embedded copy) also proves the two are the same file.
	c := jsonschema.NewCompiler()
	raw, err := os.ReadFile("../../docs/envelope.schema.json")
	if err != nil {
		panic(err)
	}
	if !bytes.Equal(raw, cliapi.EnvelopeSchema) {
		fmt.Fprintln(os.Stderr, "docs/envelope.schema.json differs from gen/cliapi.EnvelopeSchema: run make gen")
		os.Exit(1)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		panic(err)
	}
	const url = "https://github.com/microvms/microvms/docs/envelope.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		panic(err)
	}
	envelopeSchema = c.MustCompile(url)
	eventSchema = c.MustCompile(url + "#/$defs/streamEvent")
	code := m.Run()
	if code == 0 {
		code = checkRowsReached()
	}
	if err := appendSpawnedCoverage(); err != nil {
		fmt.Fprintln(os.Stderr, "adding the spawned binaries' coverage:", err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

type invocation struct {
	stdout, stderr string
	code           int
}

// cli runs the binary with a clean environment plus env, bounded in time.
func cli(t *testing.T, env []string, stdin string, args ...string) invocation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// No inherited AWS_REGION or MICROVM_* can change what a test means.
	cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running microvm %v: %v", args, err)
	}
	return invocation{stdout: out.String(), stderr: errb.String(), code: code}
}

// envelope asserts stdout is exactly one JSON object, valid against the
// generated schema, whose status and exitCode agree with the process.
func envelope(t *testing.T, inv invocation) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(inv.stdout))
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not a JSON envelope: %v\nstdout=%q\nstderr=%q", err, inv.stdout, inv.stderr)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("stdout holds more than one object: %q", inv.stdout)
	}
	return checkEnvelope(t, v, inv.code)
}

// reached is every exit status a validated envelope agreed with.
var reached sync.Map // int → true

func checkEnvelope(t *testing.T, v any, code int) map[string]any {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			reached.Store(code, true)
		}
	})
	if err := envelopeSchema.Validate(v); err != nil {
		b, _ := json.Marshal(v)
		t.Fatalf("envelope fails docs/envelope.schema.json: %v\n%s", err, b)
	}
	m := v.(map[string]any)
	// ok exits 0, or 13 with an exec's record (the reference's shape for a
	// child that exited non-zero); any other exit is a failure envelope.
	execFailed := code == int(taxonomy.KindExecFailed.Exit()) && (m["type"] == cliapi.TypeExec || m["type"] == cliapi.TypeExecStream)
	if (m["status"] == "ok") != (code == 0 || execFailed) {
		t.Fatalf("status %v with exit %d", m["status"], code)
	}
	if execFailed && m["status"] == "ok" && m["data"].(map[string]any)["exitCode"] == float64(0) {
		t.Fatalf("exit 13 with a record that exited 0: %v", m)
	}
	if m["status"] == "error" && int(m["exitCode"].(float64)) != code {
		t.Fatalf("envelope exitCode %v, process exited %d", m["exitCode"], code)
	}
	return m
}

// wantFailure asserts the exit integer, code and finding together.
func wantFailure(t *testing.T, inv invocation, kind taxonomy.ErrorKind, finding taxonomy.FindingID) map[string]any {
	t.Helper()
	m := envelope(t, inv)
	// finding is the heading (the reference's key), findingSlug the slug.
	if inv.code != int(kind.Exit()) || m["code"] != kind.Code() || m["findingSlug"] != string(finding) || m["finding"] != finding.Title() {
		t.Fatalf("got exit %d code %v finding %q (%q); want %d %s %q (%q)\n%s", inv.code, m["code"], m["findingSlug"], m["finding"], kind.Exit(), kind.Code(), finding, finding.Title(), inv.stdout)
	}
	return m
}

// wantExecFailed asserts the reference's shape for a child that exited
// non-zero: a success envelope carrying the record, and exit 13.
func wantExecFailed(t *testing.T, inv invocation) map[string]any {
	t.Helper()
	m := envelope(t, inv)
	if inv.code != int(taxonomy.KindExecFailed.Exit()) || m["status"] != cliapi.StatusOK {
		t.Fatalf("got exit %d status %v; want %d and status ok\n%s", inv.code, m["status"], taxonomy.KindExecFailed.Exit(), inv.stdout)
	}
	return m
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// statusServer answers every request with one status and agentd's error
// body: the daemon's statuses a real agentd cannot be made to produce on
// demand (a 401 needs no setup, but a 408 or a 500 does).
func statusServer(t *testing.T, status int, slug string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(taxonomy.VersionHeader, "test")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":%q,"message":"from the test server"}`, slug)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func attach(endpoint string) []string {
	return []string{"--direct", "--endpoint", endpoint, "--agent-token", "t0ken"}
}

// TestExitRows reaches each row of the exit table this issue can reach
// without AWS and asserts integer, code and finding together. A wrong edit
// to the kind→exit mapping, a finding dropped from a refusal, or a wire kind
// leaking into a local refusal turns a row red.
func TestExitRows(t *testing.T) {
	t.Run("0 success", func(t *testing.T) {
		inv := cli(t, nil, "", "--json", "constants")
		if m := envelope(t, inv); inv.code != 0 || m["type"] != cliapi.TypeConstants {
			t.Fatalf("%d %v", inv.code, m)
		}
	})
	t.Run("2 parse failure keeps kong's message", func(t *testing.T) {
		inv := cli(t, nil, "", "--json", "bogus")
		m := wantFailure(t, inv, taxonomy.KindInvalidArg, "")
		if !strings.Contains(m["error"].(string), "unexpected argument bogus") {
			t.Fatalf("kong's message lost: %v", m["error"])
		}
		if _, ok := m["data"].(map[string]any)["kind"]; ok {
			t.Fatal("a local refusal carries data.kind")
		}
	})
	t.Run("2 off-table memory names its finding", func(t *testing.T) {
		wantFailure(t, cli(t, nil, "", "cost", "--memory", "3000", "--json"), taxonomy.KindInvalidArg, taxonomy.SizeClassFinding)
	})
	t.Run("2 off-table region names its finding", func(t *testing.T) {
		args := append([]string{"--json", "health", "--region", "eu-central-1"}, attach(closedPort(t))...)
		wantFailure(t, cli(t, nil, "", args...), taxonomy.KindInvalidArg, taxonomy.RegionFinding)
	})
	t.Run("2 an off-table AWS_REGION is refused when a control plane is called", func(t *testing.T) {
		// A proxied attach mints through the control plane, so it reads the
		// variables, and holds them to the listed set, before anything is
		// sent (the endpoint is unroutable).
		for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
			inv := cli(t, []string{v + "=eu-central-1"}, "", "--json", "health", "--endpoint", "vm.invalid", "--agent-token", "t", "--microvm-id", "mvm-x")
			m := wantFailure(t, inv, taxonomy.KindInvalidArg, taxonomy.RegionFinding)
			if e := m["error"].(string); !strings.Contains(e, v+"=eu-central-1") || !strings.Contains(e, "--unlisted-region") {
				t.Fatalf("the refusal does not name the variable and the escape hatch: %s", e)
			}
		}
	})
	// Catches: AWS_REGION read by the parser again (as an env default of
	// --region): it would refuse an off-table value for commands that never
	// call AWS, and count as a --region conflicting with --unlisted-region.
	t.Run("0 AWS_REGION is not the parser's", func(t *testing.T) {
		for _, tc := range []struct {
			env  string
			args []string
		}{
			{"AWS_REGION=eu-central-1", []string{"--json", "cost"}},
			{"AWS_DEFAULT_REGION=eu-central-1", []string{"--json", "cost"}},
			{"AWS_REGION=us-east-1", []string{"--json", "cost", "--unlisted-region", "eu-central-1"}},
			{"AWS_REGION=eu-central-1", []string{"--json", "cost", "--region", "us-west-2"}},
		} {
			if inv := cli(t, []string{tc.env}, "", tc.args...); inv.code != 0 {
				t.Fatalf("%s microvm %v: exit %d\n%s", tc.env, tc.args, inv.code, inv.stdout)
			}
		}
	})
	t.Run("2 region conflicts with unlisted-region", func(t *testing.T) {
		wantFailure(t, cli(t, nil, "", "cost", "--json", "--region", "us-east-1", "--unlisted-region", "xx-test-1"), taxonomy.KindInvalidArg, taxonomy.RegionFinding)
	})
	t.Run("2 env without = is refused", func(t *testing.T) {
		args := append(append([]string{"--json", "exec", "--env", "NOEQUALS"}, attach(closedPort(t))...), "true")
		wantFailure(t, cli(t, nil, "", args...), taxonomy.KindInvalidArg, "")
	})
	t.Run("3 a daemon not bootstrapped yet carries data.kind", func(t *testing.T) {
		args := append([]string{"--json", "ack", "x-1"}, attach(statusServer(t, 503, "not_bootstrapped"))...)
		m := wantFailure(t, cli(t, nil, "", args...), taxonomy.KindRetryable, taxonomy.KindRetryable.Finding())
		if k := m["data"].(map[string]any)["kind"]; k != taxonomy.WireNotBootstrapped.String() {
			t.Fatalf("data.kind %v", k)
		}
	})
	// Catches: a refused connection left as ERR_RETRYABLE ("run the same
	// command again"), which cannot help until --endpoint is fixed, and its
	// hint not naming the flag.
	t.Run("12 nothing listens at the endpoint", func(t *testing.T) {
		args := append([]string{"--json", "health"}, attach(closedPort(t))...)
		m := wantFailure(t, cli(t, nil, "", args...), taxonomy.KindPrecondition, "")
		if k := m["data"].(map[string]any)["kind"]; k != taxonomy.WireTransport.String() {
			t.Fatalf("data.kind %v", k)
		}
		if s := m["suggestions"].([]any); len(s) == 0 || !strings.Contains(s[0].(string), "--endpoint (or MICROVM_ENDPOINT)") {
			t.Fatalf("suggestions %v", s)
		}
	})
	// Catches: a credential the SDK chain cannot resolve wrapped as the
	// retryable AuthTokenMint (exit 3), a hint naming --direct for it, and
	// the SDK's own log lines on stderr.
	t.Run("4 no AWS credentials to mint a proxy token with", func(t *testing.T) {
		inv := cli(t, []string{"AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1"}, "", "--json", "health", "--endpoint", "vm.invalid", "--agent-token", "t", "--microvm-id", "mvm-x", "--control-endpoint", "https://control.invalid")
		m := wantFailure(t, inv, taxonomy.KindCredentials, "")
		if s := fmt.Sprint(m["suggestions"]); !strings.Contains(s, "AWS_PROFILE") || strings.Contains(s, "--direct") {
			t.Fatalf("suggestions %v", s)
		}
		if strings.Contains(inv.stderr, "WARN") || strings.Contains(inv.stderr, "SDK") {
			t.Fatalf("the SDK logged on stderr: %q", inv.stderr)
		}
	})
	t.Run("4 unauthorized", func(t *testing.T) {
		args := append([]string{"--json", "ack", "x-1"}, attach(statusServer(t, 401, "unauthorized"))...)
		m := wantFailure(t, cli(t, nil, "", args...), taxonomy.KindCredentials, "")
		if m["data"].(map[string]any)["kind"] != "Unauthorized" {
			t.Fatalf("data.kind %v", m["data"])
		}
	})
	for _, tc := range []struct {
		status int
		slug   string
		wire   taxonomy.WireKind
	}{
		{404, "unknown_exec", taxonomy.WireNotFound},
		{409, "already_acked", taxonomy.WireConflict},
		{410, "stdin_closed", taxonomy.WireStdinClosed},
	} {
		// Five wire kinds share ERR_PROTOCOL; data.kind is how a consumer
		// tells them apart, so each must survive to the envelope.
		t.Run(fmt.Sprintf("5 protocol %d keeps data.kind", tc.status), func(t *testing.T) {
			args := append([]string{"--json", "stdin", "x-1", "--data", "hi"}, attach(statusServer(t, tc.status, tc.slug))...)
			if tc.status != 410 {
				args = append([]string{"--json", "ack", "x-1"}, attach(statusServer(t, tc.status, tc.slug))...)
			}
			m := wantFailure(t, cli(t, nil, "", args...), taxonomy.KindProtocol, "")
			if m["data"].(map[string]any)["kind"] != tc.wire.String() {
				t.Fatalf("data.kind %v, want %s", m["data"], tc.wire)
			}
		})
	}
	t.Run("10 client timeout", func(t *testing.T) {
		hang := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(hang)
		args := append(append([]string{"--json", "exec", "--timeout", "0.2"}, attach(srv.URL)...), "true")
		wantFailure(t, cli(t, nil, "", args...), taxonomy.KindTimeout, taxonomy.KindTimeout.Finding())
	})
	// Catches: a missing --microvm-id classed as a precondition (12) again;
	// the reference's flag is required, so its absence is exit 2.
	t.Run("2 proxied attach without a MicroVM id to mint for", func(t *testing.T) {
		// No --direct and no --microvm-id: the proxy token cannot be minted,
		// and nothing is sent anywhere (the endpoint is unroutable).
		inv := cli(t, nil, "", "--json", "health", "--endpoint", "vm.invalid", "--agent-token", "t")
		m := wantFailure(t, inv, taxonomy.KindInvalidArg, taxonomy.FindingEndpointAuth)
		if e := m["error"].(string); !strings.Contains(e, "--microvm-id (or MICROVM_ID)") || !strings.Contains(e, "--direct") {
			t.Fatalf("the refusal does not name the flag, its variable and --direct: %s", e)
		}
	})
	// Catches: --endpoint/--agent-token required by the parser again (kong's
	// refusal names neither variable) or the check dropped.
	t.Run("2 a missing endpoint or token names its variable", func(t *testing.T) {
		inv := cli(t, nil, "", "--json", "health", "--direct")
		m := wantFailure(t, inv, taxonomy.KindInvalidArg, "")
		if e := m["error"].(string); !strings.Contains(e, "MICROVM_ENDPOINT") || !strings.Contains(e, "MICROVM_AGENT_TOKEN") {
			t.Fatalf("the refusal does not name the variables: %s", e)
		}
		usage := cli(t, nil, "", "health", "--help").stdout
		if strings.Contains(usage, "--endpoint=STRING --agent-token") || !strings.Contains(usage, "MICROVM_ENDPOINT") {
			t.Fatalf("usage shows the env-filled flags as required or hides the variable:\n%s", usage)
		}
	})
	t.Run("1 a status agentd never sends", func(t *testing.T) {
		// 418 is no wire kind: the client cannot classify it, so it is the
		// table's Unexpected row, and with no wire kind there is no data.kind.
		args := append([]string{"--json", "ack", "x-1"}, attach(statusServer(t, http.StatusTeapot, "teapot"))...)
		m := wantFailure(t, cli(t, nil, "", args...), taxonomy.KindUnexpected, "")
		if _, ok := m["data"].(map[string]any)["kind"]; ok || !strings.Contains(m["error"].(string), "HTTP 418") {
			t.Fatalf("%v", m)
		}
	})
	// Elsewhere: row 9 by TestOutputGapIsPlatform (an output gap from a real
	// agentd), row 10 by TestExecStopsWaiting (--timeout and SIGINT
	// against a real agentd), row 13 by the end-to-end tests against agentd
	// and through the emulator, and rows 3, 4 (the proxy's 403 to a --direct
	// session among them), 5 and 13 again through the emulator's proxy. Row 1
	// is the 418 above alone.
	// Rows 6, 7 and 8 by TestLifecycleExitRows (emulator fault injection).
	// The rows no test reaches are unreachedRows, and TestMain fails a full
	// run that leaves any other row unreached.
}

// unreachedRows are the exit rows this CLI cannot reach yet, each with the
// commands that will reach it once they are ready. Every row is reached
// now: 6, 7 and 8 by TestLifecycleExitRows through the emulator's fault
// injection, 11 by TestRunInterrupted (only run interrupts after a launch:
// an attached command's interrupt is the timeout row), 12 by TestRunLocal
// (no agentd) and TestKeptVMAcrossProcesses (logs of a deleted group),
// 14 by TestRunVolumeAcrossRuns (a volume another MicroVM holds).
// TestUnreachedRowsAreLifecycle turns red if a row is declared unreached
// while its commands are ready.
var unreachedRows = map[taxonomy.ErrorKind][]string{
	// Row 14 (ERR_CHECKPOINT_REFUSED) is reached by TestCheckpointAcrossProcesses
	// through `run --from` of a corrupted checkpoint.
}

func TestUnreachedRowsAreLifecycle(t *testing.T) {
	for kind, cmds := range unreachedRows {
		for _, name := range cmds {
			i := slices.IndexFunc(cliapi.Commands, func(c cliapi.Command) bool { return c.Name == name })
			if i < 0 {
				t.Errorf("row %d %s waits for %q, which api/cli.yaml does not declare", kind.Exit(), kind.Code(), name)
			} else if cliapi.Commands[i].Ready {
				t.Errorf("%q is ready: reach row %d %s in TestExitRows and drop it from unreachedRows", name, kind.Exit(), kind.Code())
			}
		}
	}
}

// checkRowsReached runs after a full, passing run: every row of the exit
// table was exited by some test, or is declared in unreachedRows. A -run or
// -skip filter, -short or a missing daemon reaches less, so it checks
// nothing then.
func checkRowsReached() int {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f == nil || f.Value.String() != "" {
			return 0
		}
	}
	if testing.Short() {
		return 0
	}
	if m, _ := filepath.Glob("../agentd/*.go"); len(m) == 0 {
		return 0
	}
	code := 0
	for _, row := range taxonomy.ExitTable {
		_, hit := reached.Load(int(row.Value))
		unreached := false
		for kind := range unreachedRows {
			unreached = unreached || kind.Exit() == row.Value
		}
		switch {
		case !hit && !unreached:
			fmt.Fprintf(os.Stderr, "exit row %d %s: no test reached it and unreachedRows does not say why\n", row.Value, row.Code)
			code = 1
		case hit && unreached:
			fmt.Fprintf(os.Stderr, "exit row %d %s is reached now: drop it from unreachedRows\n", row.Value, row.Code)
			code = 1
		}
	}
	return code
}

// TestOneEnvelopeAndFlagsOnEitherSide: the global flags parse before and
// after the subcommand and yield the same envelope.
func TestOneEnvelopeAndFlagsOnEitherSide(t *testing.T) {
	for _, sub := range [][]string{{"constants"}, {"dockerfile", "--workdir", "/w"}, {"ls", "--state-dir", t.TempDir()}, {"manifest"}, {"cost", "--running-sec", "60"}} {
		before := cli(t, nil, "", append([]string{"--json"}, sub...)...)
		after := cli(t, nil, "", append(slices.Clone(sub), "--json")...)
		b, a := envelope(t, before), envelope(t, after)
		if b["type"] != a["type"] || before.code != 0 {
			t.Fatalf("%v: --json before gives %v, after %v", sub, b["type"], a["type"])
		}
		resp, _ := cliapi.ResponseFor(sub[0])
		if b["type"] != resp.Type {
			t.Fatalf("%s answered %v, api/cli.yaml says %s", sub[0], b["type"], resp.Type)
		}
		dense := cli(t, nil, "", append(slices.Clone(sub), "--dense")...)
		if dense.code != 0 || strings.HasPrefix(dense.stdout, "{") {
			t.Fatalf("--dense on %v: %d %q", sub, dense.code, dense.stdout)
		}
	}
}

// TestHelpAndVersionAreNotEnvelopes: both succeed and print themselves, as
// flags and as commands. Catches `microvm help` and `microvm version`
// refused as unknown commands again, and help for a command that is not
// that command's.
func TestHelpAndVersionAreNotEnvelopes(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"--json", "--help"}, {"exec", "--help"}, {"--version"}, {"--json", "--version"}, {"help"}, {"help", "exec"}, {"version"}, {"--json", "version"}} {
		inv := cli(t, nil, "", args...)
		if inv.code != 0 || strings.HasPrefix(strings.TrimSpace(inv.stdout), "{") || inv.stdout == "" {
			t.Fatalf("%v: exit %d stdout %q", args, inv.code, inv.stdout)
		}
	}
	if h := cli(t, nil, "", "help", "cp").stdout; !strings.Contains(h, "microvm cp") {
		t.Fatalf("help cp:\n%s", h)
	}
	if v := cli(t, nil, "", "version").stdout; !strings.Contains(v, cli(t, nil, "", "--version").stdout) {
		t.Fatalf("version %q differs from --version", v)
	}
	wantFailure(t, cli(t, nil, "", "--json", "help", "nope"), taxonomy.KindInvalidArg, "")
}
