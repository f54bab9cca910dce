package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// bin is the real microvm binary, built once; every test spawns it, so what
// is tested is what ships (flag parsing, exit status, stdout bytes).
var bin string

var envelopeSchema, eventSchema *jsonschema.Schema

func TestMain(m *testing.M) {
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
// (no agentd) and TestKeptVMAcrossProcesses (logs of a deleted group).
// TestUnreachedRowsAreLifecycle turns red if a row is declared unreached
// while its commands are ready.
var unreachedRows = map[taxonomy.ErrorKind][]string{}

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

// TestCompletion: each shell's script is generated from the parser, names
// every command and the closed domains, and bash parses it. Catches a
// command added to the tree but not completed (a hand-kept list), and a
// script broken by a help text's quote.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		inv := cli(t, nil, "", "completion", sh)
		if inv.code != 0 {
			t.Fatalf("%s: exit %d %s", sh, inv.code, inv.stderr)
		}
		for _, c := range cliapi.Commands {
			if c.Ready && !strings.Contains(inv.stdout, c.Name) {
				t.Errorf("%s completion lacks %s", sh, c.Name)
			}
		}
		for _, w := range []string{"--endpoint", "--memory", "8192", "us-west-2", "--stream"} {
			if !strings.Contains(inv.stdout, strings.TrimPrefix(w, "--")) {
				t.Errorf("%s completion lacks %s", sh, w)
			}
		}
		if path, err := exec.LookPath(sh); err == nil {
			check := exec.Command(path, "-n")
			if sh == "fish" {
				check = exec.Command(path, "--no-execute")
			}
			check.Stdin = strings.NewReader(inv.stdout)
			if out, err := check.CombinedOutput(); err != nil {
				t.Errorf("%s -n refuses the script: %v\n%s", sh, err, out)
			}
		}
	}
	wantFailure(t, cli(t, nil, "", "--json", "completion", "tcsh"), taxonomy.KindInvalidArg, "")
}

// TestManifestIsJSONOnAPipe: the only consumer that asks for a manifest
// parses it, so without --json a pipe still gets the envelope, as the
// reference writes it. Catches the table printed into a pipe again.
func TestManifestIsJSONOnAPipe(t *testing.T) {
	m := envelope(t, cli(t, nil, "", "manifest"))
	if m["type"] != cliapi.TypeManifest {
		t.Fatalf("%v", m["type"])
	}
	for _, r := range m["data"].(map[string]any)["exitCodes"].([]any) {
		row := r.(map[string]any)
		if row["code"] == taxonomy.KindRetryable.Code() && (row["finding"] != taxonomy.FindingEndpointAuth.Title() || row["findingSlug"] != string(taxonomy.FindingEndpointAuth)) {
			t.Fatalf("exit row 3 finding %v / %v", row["finding"], row["findingSlug"])
		}
	}
	if d := cli(t, nil, "", "manifest", "--dense"); strings.HasPrefix(d.stdout, "{") {
		t.Fatal("--dense manifest is JSON")
	}
}

// TestConstantsEmitJSONIsTheBareObject is the one non-envelope write.
func TestConstantsEmitJSONIsTheBareObject(t *testing.T) {
	inv := cli(t, nil, "", "constants", "--emit-json", "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(inv.stdout), &m); err != nil || inv.code != 0 {
		t.Fatalf("%v %d %q", err, inv.code, inv.stdout)
	}
	if _, ok := m["status"]; ok {
		t.Fatal("--emit-json wrote an envelope")
	}
	if m["DEFAULT_AGENT_PORT"] != float64(taxonomy.DefaultAgentPort) || len(m["MICROVM_REGIONS"].([]any)) != len(taxonomy.Regions) {
		t.Fatalf("constants drifted from the taxonomy: %v", m)
	}
	// The reference CLI's keys and values, written out: a drift checker
	// written for it reads these by name. Catches a key renamed back to Go
	// spelling (ModelAPIVersion) or a constraint dropped.
	for k, want := range map[string]any{
		"MODEL_API_VERSION":            "2025-09-09",
		"MAX_RUN_HOOK_PAYLOAD_BYTES":   float64(4096),
		"MAX_IMAGE_NAME_LEN":           float64(64),
		"IMAGE_NAME_PATTERN":           "[a-zA-Z0-9-_]+",
		"MAX_VERSION_LEN":              float64(2048),
		"VERSION_PATTERN":              `[^\s]+`,
		"MAX_TAG_KEY_LEN":              float64(128),
		"MAX_TAG_VALUE_LEN":            float64(256),
		"TAG_COMPONENT_PATTERN":        `([\p{L}\p{Z}\p{N}_.:/=+\-@]*)`,
		"MIN_ROLE_ARN_LEN":             float64(20),
		"MAX_ROLE_ARN_LEN":             float64(2048),
		"ROLE_ARN_PATTERN":             `arn:aws[a-z\-]*:iam::[0-9]{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+`,
		"MAX_MICROVM_HOOK_TIMEOUT_SEC": float64(60),
		"MAX_IMAGE_HOOK_TIMEOUT_SEC":   float64(3600),
		"MAX_DURATION_SEC":             float64(28800),
		"MIN_IDLE_DURATION_SEC":        float64(60),
	} {
		if m[k] != want {
			t.Errorf("constants[%s] = %#v, the reference publishes %#v", k, m[k], want)
		}
	}
	if sc := m["SIZE_CLASSES"].([]any)[0].(map[string]any); sc["baseline_mib"] != float64(512) || sc["peak_mib"] != float64(2048) {
		t.Errorf("SIZE_CLASSES rows %v", sc)
	}
	// The envelope form carries the same object, typed by the schema.
	env := envelope(t, cli(t, nil, "", "--json", "constants"))
	if b, _ := json.Marshal(env["data"].(map[string]any)["constants"]); string(b) != mustCompact(t, inv.stdout) {
		t.Fatal("the envelope's constants differ from --emit-json")
	}
}

func mustCompact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDockerfileStanza(t *testing.T) {
	m := envelope(t, cli(t, nil, "", "--json", "dockerfile", "--port", "9100", "--workdir", "/srv"))
	s := m["data"].(map[string]any)["stanza"].(string)
	for _, want := range []string{"FROM " + taxonomy.ManagedBaseDockerRef + "\n", "WORKDIR /srv\n", "ENV AGENTD_PORT=9100\n", "EXPOSE 9100\n", "ENV AGENTD_REPAIR_IDENTITY=1\n", "ENTRYPOINT []\n", "CMD [\"/agentd\"]\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("stanza lacks %q:\n%s", want, s)
		}
	}
	d := envelope(t, cli(t, nil, "", "--json", "dockerfile"))["data"].(map[string]any)
	if d["port"] != float64(taxonomy.DefaultAgentPort) || d["workdir"] != nil {
		t.Fatalf("defaults: %v", d)
	}
}

// TestLsReadsTheLedger writes runs through client/ledger, exactly as the
// sandbox and build pipeline do, and lists them. Catches the CLI parsing the
// ledger's files with its own idea of their keys (a listing of empty columns
// for every real run), and hiding a damaged record that may name a leak.
func TestLsReadsTheLedger(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	after, err := rec.Before("RunMicrovm", "img")
	if err != nil {
		t.Fatal(err)
	}
	if err := after("mvm-1", nil); err != nil {
		t.Fatal(err)
	}
	if err := rec.Update(func(r *ledger.Run) { r.MicrovmID = "mvm-1" }); err != nil {
		t.Fatal(err)
	}
	// A run that began and was closed before its first step: "steps": [] and
	// "closed": true, which an omitempty in the generated run type would drop.
	begun, err := l.Begin("")
	if err != nil {
		t.Fatal(err)
	}
	if err := begun.Update(func(r *ledger.Run) { r.Closed = true }); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "damaged.json"), []byte(`{"id":`), 0o600)
	inv := cli(t, []string{"MICROVM_STATE_DIR=" + dir}, "", "--json", "ls")
	m := envelope(t, inv)
	runs := m["data"].(map[string]any)["runs"].([]any)
	if len(runs) != 3 {
		t.Fatalf("runs %v, want the two recorded runs and the damaged one", runs)
	}
	first, last := runs[0].(map[string]any), runs[2].(map[string]any)
	if first["microvm_id"] != "mvm-1" || first["region"] != "us-east-1" || first["closed"] != false {
		t.Fatalf("recorded run listed as %v", first)
	}
	if last["id"] != "damaged" || last["unreadable"] != true {
		t.Fatalf("damaged record listed as %v", last)
	}
	// Each record is listed as client/ledger wrote it, key for key and in
	// its order. Wrong edit caught: cmd/microvm's conversion into the
	// generated cliapi.Run dropping a key the ledger always writes (closed,
	// steps), writing one it omits, or reordering them.
	var listed struct {
		Data struct {
			Runs []json.RawMessage `json:"runs"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(inv.stdout), &listed); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*ledger.Record{rec, begun} {
		file, err := os.ReadFile(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		var want, got bytes.Buffer
		if err := json.Compact(&want, file); err != nil {
			t.Fatal(err)
		}
		if err := json.Compact(&got, listed.Data.Runs[i]); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("run %d listed as\n%s\nthe ledger wrote\n%s", i, got.String(), want.String())
		}
	}
	human := cli(t, []string{"MICROVM_STATE_DIR=" + dir}, "", "ls")
	if !strings.Contains(human.stdout, "mvm-1") || !strings.Contains(human.stdout, "unreadable record") {
		t.Fatalf("human listing:\n%s", human.stdout)
	}
}

// TestManifest proves the manifest is the parser: every command it lists
// routes, every closed domain it publishes is what the parser accepts and
// refuses, and its exit table is the generated one the binary exits by.
func TestManifest(t *testing.T) {
	m := envelope(t, cli(t, nil, "", "--json", "manifest"))
	data := m["data"].(map[string]any)

	var got []string
	for _, c := range data["commands"].([]any) {
		cmd := c.(map[string]any)
		name := cmd["name"].(string)
		got = append(got, name)
		if inv := cli(t, nil, "", name, "--help"); inv.code != 0 {
			t.Errorf("%s does not route: %d %s", name, inv.code, inv.stderr)
		}
		resp, ok := cliapi.ResponseFor(name)
		if !ok || cmd["responseType"] != resp.Type {
			t.Errorf("%s: responseType %v, api/cli.yaml %v", name, cmd["responseType"], resp.Type)
		}
		alt := cmd["alternateResponse"]
		wantAlt := false
		for _, a := range cliapi.Alternates {
			wantAlt = wantAlt || a.Command == name
		}
		if wantAlt != (alt != nil) {
			t.Errorf("%s: alternateResponse %v", name, alt)
		}
		for _, p := range cmd["parameters"].([]any) {
			param := p.(map[string]any)
			pn := param["name"].(string)
			for _, banned := range []string{"--client-token", "--capabilities", "--connector", "--architecture"} {
				if pn == banned {
					t.Errorf("%s has %s, a value the client refuses", name, banned)
				}
			}
			if param["type"] == "boolean" && param["choices"] != nil {
				t.Errorf("%s %s: a boolean publishes choices", name, pn)
			}
			if param["choices"] != nil {
				checkDomain(t, name, pn, param["choices"].([]any))
			}
		}
	}
	var want []string
	for _, c := range cliapi.Commands {
		if c.Ready {
			want = append(want, c.Name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("parser commands %v, api/cli.yaml ready commands %v", got, want)
	}

	rows := data["exitCodes"].([]any)
	if len(rows) != len(taxonomy.ExitTable) {
		t.Fatalf("%d exit rows, table has %d", len(rows), len(taxonomy.ExitTable))
	}
	for i, r := range rows {
		row := r.(map[string]any)
		if int(row["exit"].(float64)) != int(taxonomy.ExitTable[i].Value) || row["code"] != taxonomy.ExitTable[i].Code {
			t.Errorf("row %d: %v", i, row)
		}
	}
	// The published row for ERR_INVALID_ARG is what a parse failure exits.
	inv := cli(t, nil, "", "--json", "nope")
	if inv.code != int(rows[2].(map[string]any)["exit"].(float64)) {
		t.Fatalf("published ERR_INVALID_ARG row %v, binary exited %d", rows[2], inv.code)
	}
	if !slices.Contains(data["conventions"].([]any), any(cliapi.Conventions[0])) {
		t.Fatal("conventions missing")
	}
}

// checkDomain: every published choice is accepted and an off-table value
// is refused, through the real parser.
func checkDomain(t *testing.T, command, flag string, choices []any) {
	t.Helper()
	var want []string
	switch flag {
	case "--memory":
		for _, r := range taxonomy.SizeClasses {
			want = append(want, strconv.Itoa(r.BaselineMiB))
		}
	case "--region":
		want = taxonomy.Regions
	default:
		t.Errorf("%s %s: an unexpected closed domain %v", command, flag, choices)
		return
	}
	var have []string
	for _, c := range choices {
		have = append(have, c.(string))
	}
	if !slices.Equal(have, want) {
		t.Errorf("%s %s publishes %v, the taxonomy has %v", command, flag, have, want)
	}
	if command != "cost" {
		return // the attached commands need a daemon to get past the parser; cost proves the flag group
	}
	for _, v := range append(have, "bogus-1") {
		inv := cli(t, nil, "", "--json", command, flag, v)
		if (v == "bogus-1") != (inv.code == int(taxonomy.KindInvalidArg.Exit())) {
			t.Errorf("%s %s %s: exit %d\n%s", command, flag, v, inv.code, inv.stdout)
		}
	}
}

// TestExitTableAgainstTheReference holds the exit table to the reference
// CLI's, written out here from its microvms-cli/src/exit.rs rather than read
// from the generated table, so it disagrees with a renumbered or renamed row
// instead of following it. How each row's use differs is written beside the
// row in api/errors.yaml (`reference`), which generation requires.
func TestExitTableAgainstTheReference(t *testing.T) {
	reference := []string{"", "ERR_UNEXPECTED", "ERR_INVALID_ARG", "ERR_RETRYABLE", "ERR_CREDENTIALS", "ERR_PROTOCOL",
		"ERR_BUILD_WEDGED", "ERR_LAUNCH_DIED", "ERR_WINDOW_CLOSED", "ERR_PLATFORM", "ERR_TIMEOUT", "ERR_INTERRUPTED",
		"ERR_PRECONDITION", "ERR_EXEC_FAILED"}
	if len(taxonomy.ExitTable) != len(reference) {
		t.Fatalf("%d rows, the reference has %d", len(taxonomy.ExitTable), len(reference))
	}
	for i, row := range taxonomy.ExitTable {
		if int(row.Value) != i || row.Code != reference[i] {
			t.Errorf("row %d is %d %s; the reference's is %d %s", i, row.Value, row.Code, i, reference[i])
		}
	}
}
