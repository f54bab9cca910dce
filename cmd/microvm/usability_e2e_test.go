package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestAttachedUsability drives the first-try failures of issue 15 against a
// real agentd.
func TestAttachedUsability(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}

	// Catches: health answering 0 for a token every other command is
	// refused with (the route itself is open).
	t.Run("4 health with a wrong token", func(t *testing.T) {
		bad := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=wrong", "MICROVM_DIRECT=1"}
		m := wantFailure(t, cli(t, bad, "", "--json", "health"), taxonomy.KindCredentials, "")
		if s := m["suggestions"].([]any); len(s) == 0 || !strings.Contains(s[0].(string), "--agent-token") {
			t.Fatalf("suggestions %v", s)
		}
		if inv := cli(t, env, "", "--json", "health"); inv.code != 0 {
			t.Fatalf("the right token: exit %d", inv.code)
		}
	})

	// Catches: a relative vm: path sent as it is (agentd resolves it in
	// its own working directory).
	t.Run("2 a relative vm: path", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "f")
		os.WriteFile(src, []byte("x"), 0o644)
		m := wantFailure(t, cli(t, env, "", "--json", "cp", src, "vm:relative.txt"), taxonomy.KindInvalidArg, "")
		if !strings.Contains(m["error"].(string), "vm:/relative.txt") {
			t.Fatalf("%v", m["error"])
		}
		wantFailure(t, cli(t, env, "", "--json", "cp", "vm:rel", src), taxonomy.KindInvalidArg, "")
	})

	// Catches: a local directory streamed as a file body (the read fails
	// mid-request and reads as a transport failure, exit 3).
	t.Run("2 a local directory without --tar", func(t *testing.T) {
		dir := t.TempDir()
		m := wantFailure(t, cli(t, env, "", "--json", "cp", dir, "vm:/tmp/x"), taxonomy.KindInvalidArg, "")
		if !strings.Contains(m["error"].(string), "--tar") {
			t.Fatalf("%v", m["error"])
		}
	})

	// Catches: an upload into a directory that does not exist silently
	// creating it (the daemon makes parents), and --parents not doing so.
	t.Run("12 a missing parent, then --parents", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "f")
		os.WriteFile(src, []byte("x"), 0o644)
		missing := filepath.Join(t.TempDir(), "no-such-dir")
		m := wantFailure(t, cli(t, env, "", "--json", "cp", src, "vm:"+missing+"/x"), taxonomy.KindPrecondition, "")
		if s := m["suggestions"].([]any); len(s) == 0 || !strings.Contains(s[0].(string), "--parents") {
			t.Fatalf("suggestions %v", s)
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatal("the refused upload created the directory")
		}
		envelope(t, cli(t, env, "", "--json", "cp", "--parents", src, "vm:"+missing+"/x"))
		if b, err := os.ReadFile(filepath.Join(missing, "x")); err != nil || string(b) != "x" {
			t.Fatalf("%q %v", b, err)
		}
		// A parent that is a file is refused by its stat, naming its type.
		// Catches: the stat's answer ignored (the file taken for a directory).
		m = wantFailure(t, cli(t, env, "", "--json", "cp", src, "vm:"+src+"/y"), taxonomy.KindInvalidArg, "")
		if !strings.Contains(m["error"].(string), "is a file, not a directory") {
			t.Fatalf("%v", m["error"])
		}
		// An existing parent needs nothing.
		envelope(t, cli(t, env, "", "--json", "cp", src, "vm:"+missing+"/y"))
	})

	// Catches: bytes that are not UTF-8 replaced with U+FFFD on the way
	// through the parser: a local file so named "does not exist", and a
	// command or env value runs as something else instead of being refused.
	t.Run("bytes typed are carried or refused", func(t *testing.T) {
		dir := t.TempDir()
		name := filepath.Join(dir, "bad\xffname")
		os.WriteFile(name, []byte("odd\n"), 0o644)
		dst := filepath.Join(t.TempDir(), "dst\xfe")
		envelope(t, cli(t, env, "", "--json", "cp", name, "vm:"+dst))
		back := filepath.Join(dir, "back\xfd")
		envelope(t, cli(t, env, "", "--json", "cp", "vm:"+dst, back))
		if b, err := os.ReadFile(back); err != nil || string(b) != "odd\n" {
			t.Fatalf("%q %v", b, err)
		}
		// The refusal names the word, the bad byte and its offset after a
		// valid multi-byte rune. Catches: the word counted from 0, the scan
		// stopping at the first rune or skipping the bad byte (a message
		// naming 0xc3 or offset 0, or a panic past the word's end).
		m := wantFailure(t, cli(t, env, "", "--json", "exec", "echo", "é\xffb"), taxonomy.KindInvalidArg, "")
		if e := m["error"].(string); !strings.Contains(e, "word 2 ") || !strings.Contains(e, "byte 0xff at offset 2,") {
			t.Fatalf("%v", m["error"])
		}
		// A command's own refusal points at that command's help. Catches:
		// suggestionsFor's a.command == "" test negated ("microvm --help").
		if sg := m["suggestions"].([]any); len(sg) != 1 || sg[0] != "microvm help exec, or `microvm manifest` for every flag and its domain" {
			t.Fatalf("suggestions %v", sg)
		}
		wantFailure(t, cli(t, env, "", "--json", "exec", "--env", "K=\xff", "true"), taxonomy.KindInvalidArg, "")
	})

	// Catches: a transfer on a terminal with no progress, and progress
	// drawn into a pipe or under --quiet.
	t.Run("progress on a terminal only", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "big")
		os.WriteFile(src, bytes.Repeat([]byte("0123456789abcdef"), 1<<18), 0o644) // 4 MiB
		dst := filepath.Join(t.TempDir(), "big")
		tty := onTerminal(t, env, bin, "cp", src, "vm:"+dst)
		if !strings.Contains(tty, "% |█") || !strings.Contains(tty, "upload "+src+": done") {
			t.Fatalf("no progress bar on a terminal:\n%q", tty)
		}
		piped := cli(t, env, "", "cp", src, "vm:"+dst)
		if piped.code != 0 || strings.Contains(piped.stderr, "%") {
			t.Fatalf("progress into a pipe: %q", piped.stderr)
		}
		if q := onTerminal(t, env, bin, "--quiet", "cp", src, "vm:"+dst); strings.Contains(q, "%") {
			t.Fatalf("progress under --quiet: %q", q)
		}
	})
}

// onTerminal runs the binary under script(1), so stdout and stderr are a
// terminal, and returns what the terminal showed.
func onTerminal(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) is not installed: no terminal to test on")
	}
	quoted := []string{shellWord(bin)}
	for _, a := range args {
		quoted = append(quoted, shellWord(a))
	}
	cmd := exec.Command(script, "-qefc", strings.Join(quoted, " "), "/dev/null")
	cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "TERM=xterm-256color"}, coverEnv()...), env...)
	done := make(chan struct{})
	timer := time.AfterFunc(60*time.Second, func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
		close(done)
	})
	defer timer.Stop()
	// A failing command still drew what it drew (doctor exits 12 here).
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v under a terminal: %v\n%s", args, err, out)
	}
	return string(out)
}

func shellWord(w string) string { return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'" }

// TestTablesAreFramesOnATerminal: ls draws a frame on a terminal, with a
// leaked run in red; a pipe gets plain text; NO_COLOR keeps the frame and
// drops every colour. Catches tabwriter text on a terminal, escape codes in
// a pipe, and NO_COLOR ignored.
func TestTablesAreFramesOnATerminal(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Update(func(r *ledger.Run) { r.MicrovmID, r.Leaked = "mvm-leak", []string{"mvm-leak"} }); err != nil {
		t.Fatal(err)
	}
	env := []string{"MICROVM_STATE_DIR=" + dir}
	tty := onTerminal(t, env, bin, "ls")
	if !strings.Contains(tty, "╭") || !strings.Contains(tty, "mvm-leak") || !strings.Contains(tty, "1 with leaks") {
		t.Fatalf("no frame on a terminal:\n%s", tty)
	}
	if !strings.Contains(tty, "\x1b[") {
		t.Fatalf("no colour on a terminal:\n%q", tty)
	}
	plain := onTerminal(t, append(env, "NO_COLOR=1"), bin, "ls")
	if !strings.Contains(plain, "╭") || strings.Contains(plain, "\x1b[3") || strings.Contains(plain, "\x1b[1m") {
		t.Fatalf("NO_COLOR: %q", plain)
	}
	piped := cli(t, env, "", "ls")
	if strings.ContainsAny(piped.stdout, "╭│\x1b") || !strings.Contains(piped.stdout, "RUN") {
		t.Fatalf("a pipe got a frame:\n%s", piped.stdout)
	}
	for _, args := range [][]string{{"cost", "--running-sec", "60"}, {"manifest"}, {"doctor", "--region", "us-east-1"}} {
		if out := onTerminal(t, []string{"AWS_EC2_METADATA_DISABLED=true"}, bin, args...); !strings.Contains(out, "╭") {
			t.Fatalf("%v on a terminal:\n%s", args, out)
		}
	}
}

// TestCostWarnsOnceAndDenseIsOneLine: the stale-rate warning is written
// once, on stderr; --dense is one short line of figures. Catches the
// report's text (which carries the warning) printed beside the warning,
// and --dense flattening the whole report JSON.
func TestCostWarnsOnceAndDenseIsOneLine(t *testing.T) {
	inv := cli(t, nil, "", "cost", "--running-sec", "3600", "--compare")
	if n := strings.Count(inv.stdout+inv.stderr, "rate table was read"); n > 1 {
		t.Fatalf("the staleness warning appears %d times:\n%s%s", n, inv.stdout, inv.stderr)
	}
	d := cli(t, nil, "", "cost", "--running-sec", "3600", "--compare", "--dense")
	if d.code != 0 || strings.Count(d.stdout, "\n") != 1 || len(d.stdout) > 400 || strings.Contains(d.stdout, "{") {
		t.Fatalf("--dense is %d bytes:\n%s", len(d.stdout), d.stdout)
	}
}

// TestSchemaIsTight: envelopes a wrong edit would produce fail the schema.
// Each was accepted before the schema closed its keys.
func TestSchemaIsTight(t *testing.T) {
	good := envelope(t, cli(t, nil, "", "--json", "cost", "--running-sec", "60", "--compare"))
	cons := envelope(t, cli(t, nil, "", "--json", "constants"))
	man := envelope(t, cli(t, nil, "", "--json", "manifest"))
	mutate := func(m map[string]any, f func(map[string]any)) any {
		b, _ := json.Marshal(m)
		var c map[string]any
		json.Unmarshal(b, &c)
		f(c)
		return c
	}
	for name, bad := range map[string]any{
		"phase bogus": map[string]any{"status": "ok", "apiVersion": cliapi.APIVersion, "type": cliapi.TypeExec,
			"data": map[string]any{"execId": "x", "phase": "bogus", "exitCode": nil, "signal": nil, "stdout": "", "stderr": "", "truncated": false}},
		"cost report empty": mutate(good, func(c map[string]any) { c["data"].(map[string]any)["report"] = map[string]any{} }),
		"cost line usd a number": mutate(good, func(c map[string]any) {
			c["data"].(map[string]any)["report"].(map[string]any)["lines"].([]any)[0].(map[string]any)["usd"] = 1.5
		}),
		"constant wrongly typed": mutate(cons, func(c map[string]any) {
			c["data"].(map[string]any)["constants"].(map[string]any)["MAX_RUN_HOOK_PAYLOAD_BYTES"] = "4096"
		}),
		"constant missing": mutate(cons, func(c map[string]any) {
			delete(c["data"].(map[string]any)["constants"].(map[string]any), "MODEL_API_VERSION")
		}),
		"manifest param type bogus": mutate(man, func(c map[string]any) {
			c["data"].(map[string]any)["commands"].([]any)[0].(map[string]any)["parameters"].([]any)[0].(map[string]any)["type"] = "bogus"
		}),
		"runs item with an unknown key": map[string]any{"status": "ok", "apiVersion": cliapi.APIVersion, "type": cliapi.TypeRuns,
			"data": map[string]any{"stateDir": "/x", "runs": []any{map[string]any{"id": "r", "bogus": 1}}}},
		"doctor check without remedy": map[string]any{"status": "ok", "apiVersion": cliapi.APIVersion, "type": cliapi.TypeDoctor,
			"data": map[string]any{"ok": true, "checks": []any{map[string]any{"name": "c", "ok": true, "detail": "", "fatal": true}}}},
		"finding slug in finding": map[string]any{"status": "error", "apiVersion": cliapi.APIVersion, "error": "e", "code": "ERR_RETRYABLE", "exitCode": 3,
			"finding": "endpoint-auth", "findingSlug": "endpoint-auth", "suggestions": []any{}, "data": map[string]any{}},
	} {
		if envelopeSchema.Validate(bad) == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
	}
}

// TestCpInterruptAndMissingPath: Ctrl-C during a cp leaves the VM as it was
// (the timeout row, not "after launch; teardown ran" and not "run the same
// command again"), and a 404 on a download names the vm: path, not an exec
// id. Catches the interrupt mapping narrowed to exec, and the exec-id hint
// given for a file.
func TestCpInterruptAndMissingPath(t *testing.T) {
	arrived := make(chan struct{}, 1)
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	dst := filepath.Join(t.TempDir(), "out")
	s := startCLI(t, 20*time.Second, nil, nil, append([]string{"--json", "cp", "vm:/etc/hostname", dst}, attach(srv.URL)...)...)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the download never reached the server")
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	m := wantFailure(t, s.wait(t), taxonomy.KindTimeout, taxonomy.KindTimeout.Finding())
	if sg := fmt.Sprint(m["suggestions"]); strings.Contains(sg, "--timeout") || !strings.Contains(sg, "nothing on the VM was stopped") {
		t.Fatalf("suggestions %v", sg)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("an interrupted download left a file under the asked name")
	}

	nf := wantFailure(t, cli(t, nil, "", append([]string{"--json", "cp", "vm:/no/such/file", dst}, attach(statusServer(t, 404, "not_found"))...)...), taxonomy.KindProtocol, "")
	if sg := fmt.Sprint(nf["suggestions"]); !strings.Contains(sg, "vm: path") || strings.Contains(sg, "exec id") {
		t.Fatalf("a missing file's hint: %v", sg)
	}
}

// Catches (envelope.go's suggestionsFor): a parse error, which names no
// command, suggesting "microvm help , or ..."; a precondition outside cp
// not pointing at doctor (a.parser != nil negated).
func TestRefusalsSuggestTheNextStep(t *testing.T) {
	const manifest = ", or `microvm manifest` for every flag and its domain"
	m := wantFailure(t, cli(t, nil, "", "--json", "no-such-command"), taxonomy.KindInvalidArg, "")
	if sg := m["suggestions"].([]any); len(sg) != 1 || sg[0] != "microvm --help"+manifest {
		t.Fatalf("parse error: suggestions %v", sg)
	}
	// Until kong has parsed, --json is read from the raw words: a typo
	// without it is a human's error on stderr, with --json=true an
	// envelope. Catches: either half of rawFlag's match negated (every
	// parse failure an envelope on stdout).
	inv := cli(t, nil, "", "no-such-command")
	if inv.code != int(taxonomy.KindInvalidArg.Exit()) || inv.stdout != "" || !strings.HasPrefix(inv.stderr, "microvm: "+taxonomy.KindInvalidArg.Code()+": ") {
		t.Fatalf("human parse error: exit %d stdout %q stderr %q", inv.code, inv.stdout, inv.stderr)
	}
	wantFailure(t, cli(t, nil, "", "--json=true", "no-such-command"), taxonomy.KindInvalidArg, "")
	// An AWS build without a role is refused before any call to AWS.
	daemon := filepath.Join(t.TempDir(), "agentd")
	if err := os.WriteFile(daemon, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m = wantFailure(t, cli(t, awsEnv(), "", "--json", "build", daemon, "--region", "us-east-1"), taxonomy.KindPrecondition, "")
	if sg := m["suggestions"].([]any); len(sg) != 1 || sg[0] != "microvm doctor" {
		t.Fatalf("precondition: suggestions %v", sg)
	}
	// Forgetting --local on a machine with no AWS credentials at all: one
	// refusal that names --local and `microvm emulator`, before the aarch64
	// daemon, the build role or the instance-metadata service's own words.
	// Catches: the chain's failure reached only at the first signed call,
	// and hints that never mention the local paths.
	for _, args := range [][]string{{"run"}, {"build", daemon}, {"suspend", "mvm-x"}} {
		inv := cli(t, []string{"AWS_EC2_METADATA_DISABLED=true"}, "", append([]string{"--json"}, args...)...)
		m = wantFailure(t, inv, taxonomy.KindCredentials, "")
		sg := fmt.Sprint(m["suggestions"])
		if !strings.Contains(sg, "--local") || !strings.Contains(sg, "microvm emulator") || strings.Contains(m["error"].(string), "aarch64") {
			t.Fatalf("microvm %v: %s\n%v", args, m["error"], sg)
		}
	}
}

// exitedFour matches the verdict's note for a child that exited 4, as the
// waiting and the streaming paths word it.
var exitedFour = regexp.MustCompile(`exited with status 4|\(exit 4\)`)

// Catches (envelope.go): a failed exec's verdict left off stderr in human
// and dense output, printed for a success, or printed without its note.
// stdout carries only the child's bytes either way.
func TestFailedExecVerdictGoesToStderr(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	failed := int(taxonomy.KindExecFailed.Exit())
	inv := cli(t, env, "", "exec", "--", "sh", "-c", "echo out; exit 4")
	// Human mode: stderr is the one-line usage summary, then the verdict.
	usage, verdict, _ := strings.Cut(inv.stderr, "\n")
	if inv.code != failed || inv.stdout != "out\n" || !strings.HasPrefix(usage, "usage: ") || !strings.HasPrefix(verdict, "microvm: ") || !exitedFour.MatchString(verdict) {
		t.Fatalf("human: exit %d stdout %q stderr %q", inv.code, inv.stdout, inv.stderr)
	}
	inv = cli(t, env, "", "--dense", "exec", "--", "sh", "-c", "exit 4")
	if inv.code != failed || !strings.HasPrefix(inv.stderr, fmt.Sprintf("exit=%d ", failed)) || !exitedFour.MatchString(inv.stderr) {
		t.Fatalf("dense: exit %d stderr %q", inv.code, inv.stderr)
	}
	inv = cli(t, env, "", "exec", "--", "echo", "fine")
	if inv.code != 0 || inv.stdout != "fine\n" || !strings.HasPrefix(inv.stderr, "usage: ") || strings.Count(inv.stderr, "\n") != 1 || !strings.HasSuffix(inv.stderr, "(rusage)\n") {
		t.Fatalf("success: exit %d stdout %q stderr %q", inv.code, inv.stdout, inv.stderr)
	}
}

// The rate table's staleness is said at most once a day, and never under
// --quiet; the JSON report still carries it. Catches: the warning on every
// run (the stamp not read, or not written), --quiet not silencing it, and
// the JSON losing it.
func TestStalenessOnceADayNeverQuiet(t *testing.T) {
	stale := data(envelope(t, cli(t, nil, "", "--json", "cost", "--running-sec", "60")))["report"].(map[string]any)["staleness"]
	if stale == "" {
		t.Skip("the pinned rate table is not stale today")
	}
	const said = "rate table was read"
	cache := []string{"XDG_CACHE_HOME=" + t.TempDir()}
	if inv := cli(t, cache, "", "--quiet", "cost", "--running-sec", "60"); strings.Contains(inv.stderr, said) {
		t.Fatalf("--quiet printed the staleness:\n%s", inv.stderr)
	}
	if inv := cli(t, cache, "", "cost", "--running-sec", "60"); strings.Count(inv.stderr, said) != 1 {
		t.Fatalf("the first run of the day does not say it once:\n%s", inv.stderr)
	}
	if inv := cli(t, cache, "", "cost", "--running-sec", "60"); strings.Contains(inv.stderr, said) {
		t.Fatalf("the second run of the day says it again:\n%s", inv.stderr)
	}
	if d := data(envelope(t, cli(t, cache, "", "--json", "cost", "--running-sec", "60"))); d["report"].(map[string]any)["staleness"] != stale {
		t.Fatalf("the JSON report lost the staleness: %v", d)
	}
}

// TestExecUsageUnderJSON: --json carries data.usage (the output bytes the
// command wrote, how it was measured) and data.oomKilled, and writes no
// usage line to stderr. Catches: the summary printed in a machine mode, or
// usage dropped between the client's Result and the envelope.
func TestExecUsageUnderJSON(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	inv := cli(t, env, "", "--json", "exec", "--", "sh", "-c", "printf hello; printf e >&2")
	if inv.code != 0 || strings.Contains(inv.stderr, "usage: ") {
		t.Fatalf("exit %d stderr %q", inv.code, inv.stderr)
	}
	m := envelope(t, inv)
	data, _ := m["data"].(map[string]any)
	u, _ := data["usage"].(map[string]any)
	if u == nil || u["source"] != "rusage" || u["stdoutBytes"] != float64(5) || u["stderrBytes"] != float64(1) || data["oomKilled"] != false {
		t.Fatalf("data %v", data)
	}
	if _, ok := u["missing"].([]any); !ok {
		t.Fatalf("usage.missing %v, want a list", u["missing"])
	}
}
