package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/cliapi"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// lifecycleEnv is a clean environment for the lifecycle commands: the test's
// agentd for the emulator's guests, and a ledger and artifact store of the
// test's own.
func lifecycleEnv(t *testing.T) (env []string, stateDir string) {
	t.Helper()
	stateDir = t.TempDir()
	return []string{"MICROVM_AGENTD=" + agentdBin(t), "MICROVM_STATE_DIR=" + stateDir, "MICROVM_ARTIFACT_DIR=" + t.TempDir()}, stateDir
}

// testEmulator serves an emulator with agentd guests that moves with the
// wall clock, as `microvm emulator` does, with the plans and clock the test
// injects.
func testEmulator(t *testing.T, o emulator.Options) (*emulator.Server, string) {
	t.Helper()
	o.VMs = emulator.AgentdLauncher(agentdBin(t), nil)
	o.WallClock = true
	o.StateDir = t.TempDir()
	emu := emulator.New(o)
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return emu, url
}

func data(m map[string]any) map[string]any { return m["data"].(map[string]any) }

// Catches: run without teardown by default, a run that prints anything but
// the child's bytes on stdout, a cost left out, an exit status that is not
// the command's, a ledger that is not closed after a clean teardown.
func TestRunLocal(t *testing.T) {
	env, stateDir := lifecycleEnv(t)
	t.Run("human: stdout is the VM's answer", func(t *testing.T) {
		inv := cli(t, env, "", "run", "--local", "--exec", "echo from-the-vm; echo to-stderr >&2")
		if inv.code != 0 || inv.stdout != "from-the-vm\n" {
			t.Fatalf("exit %d stdout %q\nstderr=%s", inv.code, inv.stdout, inv.stderr)
		}
		for _, want := range []string{"to-stderr", "teardown clean", "total:"} {
			if !strings.Contains(inv.stderr, want) {
				t.Fatalf("stderr lacks %q:\n%s", want, inv.stderr)
			}
		}
	})
	t.Run("a Dockerfile step the emulator cannot perform is named, and the local artifact is removed", func(t *testing.T) {
		df := filepath.Join(t.TempDir(), "Dockerfile")
		body := "FROM public.ecr.aws/amazonlinux/amazonlinux:2023-minimal\nCOPY agentd /agentd\nRUN dnf install -y git\nWORKDIR /work\nENV AGENTD_PORT=9000\nENTRYPOINT []\nCMD [\"/agentd\"]\n"
		if err := os.WriteFile(df, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		artifacts := t.TempDir()
		own := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "MICROVM_ARTIFACT_DIR=") })
		inv := cli(t, append(own, "MICROVM_ARTIFACT_DIR="+artifacts), "", "run", "--local", "--dockerfile", df, "--exec", "pwd")
		if inv.code != 0 || inv.stdout != "/work\n" || !strings.Contains(inv.stderr, "does not perform this Dockerfile step; its guests run without it: RUN dnf install -y git") {
			t.Fatalf("exit %d stdout %q\n%s", inv.code, inv.stdout, inv.stderr)
		}
		if !strings.Contains(inv.stderr, "uploading the artifact") {
			t.Fatalf("no artifact went to the local store:\n%s", inv.stderr)
		}
		if left, _ := filepath.Glob(filepath.Join(artifacts, "*", "*")); len(left) != 0 {
			t.Fatalf("the torn-down run left its artifact: %v", left)
		}
	})
	t.Run("json", func(t *testing.T) {
		inv := cli(t, env, "", "--json", "run", "--local", "--exec", "uname -s")
		d := data(envelope(t, inv))
		if inv.code != 0 || d["stdout"] != "Linux\n" || d["execExitCode"].(float64) != 0 || d["kept"] != false || d["agentToken"] != nil {
			t.Fatalf("%d %v", inv.code, d)
		}
		if len(d["leaked"].([]any)) != 0 || d["cost"] == nil || d["microvmId"] == "" || !strings.HasPrefix(d["imageIdentifier"].(string), "arn:aws:lambda:") {
			t.Fatalf("%v", d)
		}
		// Catches: a local run's cost read as a bill (nothing is billed
		// locally; the figures are what AWS would charge).
		if label := d["cost"].(map[string]any)["label"].(string); !strings.Contains(label, "nothing is billed") || !strings.Contains(label, "AWS would bill") {
			t.Fatalf("the local cost label %q", label)
		}
		checkRunByCommand(t, env, d["microvmId"].(string))
	})
	t.Run("13 a non-zero exit is ERR_EXEC_FAILED and still tears down", func(t *testing.T) {
		inv := cli(t, env, "", "--json", "run", "--local", "--exec", "exit 3")
		d := data(wantFailure(t, inv, taxonomy.KindExecFailed, ""))
		if d["execExitCode"].(float64) != 3 || len(d["leaked"].([]any)) != 0 {
			t.Fatalf("%v", d)
		}
	})
	t.Run("2 --keep with --local is refused", func(t *testing.T) {
		wantFailure(t, cli(t, env, "", "--json", "run", "--local", "--keep"), taxonomy.KindInvalidArg, "")
	})
	t.Run("2 an idle policy under the minimum names its finding", func(t *testing.T) {
		wantFailure(t, cli(t, env, "", "--json", "run", "--local", "--max-idle-sec", "59"), taxonomy.KindInvalidArg, taxonomy.FindingIdlePolicy)
	})
	t.Run("12 no agentd anywhere", func(t *testing.T) {
		// A copy of the binary with no agentd beside it, and none on PATH.
		lone := filepath.Join(t.TempDir(), "microvm")
		b, err := os.ReadFile(bin)
		if err != nil || os.WriteFile(lone, b, 0o755) != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(lone, "--json", "run", "--local")
		cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=/nonexistent", "MICROVM_STATE_DIR=" + t.TempDir()}, coverEnv()...)
		var out bytes.Buffer
		cmd.Stdout = &out
		err = cmd.Run()
		inv := invocation{stdout: out.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			inv.code = ee.ExitCode()
		}
		m := wantFailure(t, inv, taxonomy.KindPrecondition, "")
		for _, place := range []string{"next to the microvm executable", "PATH", "MICROVM_AGENTD"} {
			if !strings.Contains(m["error"].(string), place) {
				t.Fatalf("the refusal does not name %s: %v", place, m["error"])
			}
		}
	})
	t.Run("ls lists the runs, closed", func(t *testing.T) {
		runs, unreadable, err := ledger.List(stateDir)
		if err != nil || len(unreadable) > 0 || len(runs) < 3 {
			t.Fatalf("%v %v %d", err, unreadable, len(runs))
		}
		for _, r := range runs {
			if !r.Closed || r.MicrovmID == "" || len(r.Leaked) > 0 {
				t.Fatalf("run %+v is not closed clean", r)
			}
		}
		// Closed runs are listed with --all only.
		d := data(envelope(t, cli(t, append(env, "AWS_EC2_METADATA_DISABLED=true"), "", "--json", "ls", "--all")))
		if len(d["runs"].([]any)) != len(runs) {
			t.Fatalf("ls --all lists %d runs, the ledger holds %d", len(d["runs"].([]any)), len(runs))
		}
		if d := data(envelope(t, cli(t, append(env, "AWS_EC2_METADATA_DISABLED=true"), "", "--json", "ls"))); len(d["runs"].([]any)) != 0 {
			t.Fatalf("ls without --all lists closed runs: %v", d["runs"])
		}
	})
}

// clock is an emulator clock a test moves by hand.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

// Catches: a lifecycle failure that exits any row but its own (6, 7, 8), a
// failure path that leaves a MicroVM running, and a leak that is not named.
func TestLifecycleExitRows(t *testing.T) {
	env, _ := lifecycleEnv(t)
	t.Run("6 a wedged build, and the image it leaves is named", func(t *testing.T) {
		emu, url := testEmulator(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Wedge: true} }})
		wantFailure(t, cli(t, env, "", "--json", "build", "--control-endpoint", url), taxonomy.KindBuildWedged, taxonomy.FindingClientTokenPermanent)
		inv := cli(t, env, "", "--json", "run", "--control-endpoint", url, "--exec", "true")
		d := data(wantFailure(t, inv, taxonomy.KindBuildWedged, taxonomy.FindingClientTokenPermanent))
		leaked := d["leaked"].([]any)
		if len(leaked) == 0 || !strings.Contains(leaked[0].(string), d["imageIdentifier"].(string)) {
			t.Fatalf("the wedged image (which cannot be deleted) is not named as leaked: %v", d)
		}
		if live := emu.LiveMicrovms(); len(live) != 0 {
			t.Fatalf("MicroVMs left: %v", live)
		}
	})
	t.Run("7 a launch that dies before RUNNING", func(t *testing.T) {
		const reason = "Run lifecycle hook returned HTTP status 500. Please check your hook endpoint and application logs for more details."
		emu, url := testEmulator(t, emulator.Options{Launches: func(string) emulator.LaunchPlan { return emulator.LaunchPlan{DieReason: reason} }})
		arn := emu.AddImage("dies")
		inv := cli(t, env, "", "--json", "run", "--control-endpoint", url, "--image", "dies", "--exec", "true")
		m := wantFailure(t, inv, taxonomy.KindLaunchDied, taxonomy.MicrovmStateFinding)
		d := data(m)
		if !strings.Contains(m["error"].(string), "HTTP status 500") || d["imageIdentifier"] != arn || len(d["leaked"].([]any)) != 0 {
			t.Fatalf("%v", m)
		}
		if live := emu.LiveMicrovms(); len(live) != 0 {
			t.Fatalf("MicroVMs left: %v", live)
		}
	})
	t.Run("8 a resume past the suspended window", func(t *testing.T) {
		var c clock
		emu, url := testEmulator(t, emulator.Options{Now: c.now})
		emu.AddImage("windowed")
		at := []string{"--control-endpoint", url}
		d := data(envelope(t, cli(t, env, "", append([]string{"--json", "run", "--keep", "--image", "windowed", "--suspended-sec", "60"}, at...)...)))
		id := d["microvmId"].(string)
		if d["kept"] != true || d["agentToken"] == nil {
			t.Fatalf("%v", d)
		}
		s := data(envelope(t, cli(t, env, "", append([]string{"--json", "suspend", id}, at...)...)))
		if s["state"] != "SUSPENDED" {
			t.Fatalf("%v", s)
		}
		c.advance(61 * time.Second)
		m := wantFailure(t, cli(t, env, "", append([]string{"--json", "resume", id}, at...)...), taxonomy.KindWindowClosed, taxonomy.FindingIdlePolicy)
		if !strings.Contains(m["error"].(string), "suspendedDurationSeconds=60") {
			t.Fatalf("%v", m["error"])
		}
		if live := emu.LiveMicrovms(); len(live) != 0 {
			t.Fatalf("the platform's window ended the VM, the emulator did not: %v", live)
		}
		// A second suspend is refused locally, naming the finding.
		wantFailure(t, cli(t, env, "", append([]string{"--json", "suspend", id}, at...)...), taxonomy.KindInvalidArg, taxonomy.FindingSuspendIsFreeze)
	})
}

// emulatorProcess is `microvm emulator` running in the background.
type emulatorProcess struct {
	cmd  *exec.Cmd
	url  string
	out  bytes.Buffer
	errb *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startEmulator runs `microvm emulator` on a free port and reads its URL
// from the first line it writes on stderr.
func startEmulator(t *testing.T, env []string, args ...string) *emulatorProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	p := &emulatorProcess{errb: &lockedBuffer{}}
	p.cmd = exec.CommandContext(ctx, bin, append([]string{"emulator", "--listen", "127.0.0.1:0", "--json"}, args...)...)
	p.cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...)
	p.cmd.Stdout = &p.out
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		_ = p.cmd.Wait()
		cancel()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.errb.Write([]byte(line + "\n"))
			if i := strings.Index(line, " at http://"); i >= 0 && len(urls) == 0 {
				urls <- line[i+4:]
			}
		}
	}()
	select {
	case p.url = <-urls:
	case <-ctx.Done():
		t.Fatalf("microvm emulator never said where it serves: %s", p.errb.String())
	}
	return p
}

// stop interrupts the emulator as Ctrl-C does and returns its invocation.
func (p *emulatorProcess) stop(t *testing.T) invocation {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := p.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	return invocation{stdout: p.out.String(), stderr: p.errb.String(), code: code}
}

// Catches, across separate processes against one `microvm emulator`: a
// reuse that rebuilds, a name that does not resolve to the built image, a
// kept VM that cannot be attached with what run reported, a suspend that
// loses the guest's files or token, a resume that does not reattach, a
// terminate that leaves the VM, its image, its log group or its ledger
// record behind, and an emulator whose Ctrl-C leaves a guest running.
func TestKeptVMAcrossProcesses(t *testing.T) {
	env, stateDir := lifecycleEnv(t)
	emu := startEmulator(t, env)
	env = append(env, "AWS_ENDPOINT_URL="+emu.url) // every service: logs and teardown reach CloudWatch Logs there
	run := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(m)
	}

	first := run("build", "--reuse", "--name", "kept")
	if first["reused"] != false || !strings.HasPrefix(first["imageName"].(string), "kept-") {
		t.Fatalf("%v", first)
	}
	again := run("build", "--reuse", "--name", "kept")
	if again["reused"] != true || again["imageIdentifier"] != first["imageIdentifier"] {
		t.Fatalf("the second build --reuse did not reuse: %v", again)
	}
	name := first["imageName"].(string)
	logs := run("logs", name)
	if len(logs["lines"].([]any)) == 0 || logs["logGroup"] != taxonomy.BuildLogGroupPrefix+name {
		t.Fatalf("%v", logs)
	}

	kept := run("run", "--keep", "--image", name, "--launch-env", "GREETING=hello")
	if kept["imageIdentifier"] != first["imageIdentifier"] || kept["kept"] != true {
		t.Fatalf("%v", kept)
	}
	id := kept["microvmId"].(string)
	attach := []string{"--endpoint", kept["endpoint"].(string), "--agent-token", kept["agentToken"].(string), "--microvm-id", id}

	// The kept MicroVM is remembered for this user only, and reached by its
	// id alone; an explicit flag still wins over what is remembered.
	// Catches: a record others can read, an attached command that ignores
	// the record, and a record that overrides an explicit --agent-token.
	record := filepath.Join(stateDir, "kept", id+".json")
	if st, err := os.Stat(record); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the kept record: %v %v", st, err)
	}
	byID := cli(t, env, "", "exec", "--microvm-id", id, "echo", "by-id")
	if byID.code != 0 || byID.stdout != "by-id\n" {
		t.Fatalf("exec by id alone: exit %d %q\n%s", byID.code, byID.stdout, byID.stderr)
	}
	wantFailure(t, cli(t, append(env, "MICROVM_ID="+id), "", "--json", "exec", "--agent-token", "not-the-token", "true"), taxonomy.KindCredentials, "")

	// ls shows what is alive, joined with the ledger. Catches: ls reading
	// the ledger alone, the kept MicroVM without its state, age or cost so
	// far, and the join to its run record lost.
	ls := run("ls")
	var found map[string]any
	for _, m := range ls["microvms"].([]any) {
		if m.(map[string]any)["microvmId"] == id {
			found = m.(map[string]any)
		}
	}
	if found == nil || found["state"] != "RUNNING" || found["kept"] != true || found["runId"] == nil || found["costSoFarUsd"] == nil || found["ageSeconds"] == nil || found["runningIn"] != nil || ls["controlPlaneError"] != nil {
		t.Fatalf("ls: %v", ls)
	}

	dir := t.TempDir()
	local := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(local, []byte("carried across a freeze\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(dir, "in-vm.txt")
	run(append([]string{"cp", "--parents", local, "vm:" + remote}, attach...)...) // the guest has no such directory: --parents makes it
	ex := run(append(append([]string{"exec"}, attach...), "cat "+remote+"; echo $GREETING")...)
	if ex["stdout"] != "carried across a freeze\nhello\n" {
		t.Fatalf("%v", ex)
	}
	if s := run("suspend", id); s["state"] != "SUSPENDED" {
		t.Fatalf("%v", s)
	}
	// Catches: an exec on a suspended MicroVM answered "transient, run it
	// again" (exit 3 with the proxy's 502), which never names the resume.
	m := wantFailure(t, cli(t, env, "", "--json", "exec", "--microvm-id", id, "true"), taxonomy.KindPrecondition, taxonomy.FindingSuspendIsFreeze)
	if sg := fmt.Sprint(m["suggestions"]); !strings.Contains(sg, "microvm resume "+id) || !strings.Contains(m["error"].(string), "SUSPENDED") {
		t.Fatalf("%v: %v", m["error"], sg)
	}
	r := run("resume", id)
	if r["state"] != "RUNNING" || r["endpoint"] != kept["endpoint"] {
		t.Fatalf("%v", r)
	}
	ex = run(append(append([]string{"exec"}, attach...), "cat "+remote)...)
	if ex["stdout"] != "carried across a freeze\n" {
		t.Fatalf("after resume: %v", ex)
	}
	det := run(append(append([]string{"exec", "--detach"}, attach...), "sleep 30")...)
	k := run(append([]string{"kill", det["execId"].(string)}, attach...)...)
	if k["killed"] != true {
		t.Fatalf("%v", k)
	}
	doc := run("doctor")
	if doc["ok"] != true {
		t.Fatalf("%v", doc)
	}

	td := run("terminate", id, "--delete-image", "--wait")
	if td["state"] != string(cp.MicrovmStateTERMINATED) || len(td["leaked"].([]any)) != 0 || len(td["undeletedLogGroups"].([]any)) != 0 || td["imageIdentifier"] != first["imageIdentifier"] {
		t.Fatalf("%v", td)
	}
	if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("terminate left the kept record: %v", err)
	}
	wantFailure(t, cli(t, env, "", "--json", "logs", name), taxonomy.KindPrecondition, taxonomy.FindingBuildLogsLocation)
	runs, _, err := ledger.List(stateDir)
	if err != nil || len(runs) != 1 || !runs[0].Closed || runs[0].MicrovmID != id {
		t.Fatalf("the ledger does not hold the kept run closed: %v %+v", err, runs)
	}

	inv := emu.stop(t)
	m = envelope(t, inv)
	if inv.code != 0 || m["type"] != cliapi.TypeEmulator || data(m)["endpoint"] != emu.url {
		t.Fatalf("%d %v", inv.code, m)
	}
}

// Catches: an interrupted run that skips its teardown, exits any row but
// ERR_INTERRUPTED, or leaves its ledger record open with nothing leaked.
func TestRunInterrupted(t *testing.T) {
	env, stateDir := lifecycleEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--json", "run", "--local", "--exec", "sleep 60")
	cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, coverEnv()...), env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "microvm: exec ") {
				once.Do(func() { close(started) })
			}
		}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the run never started its exec")
	}
	time.Sleep(200 * time.Millisecond) // the exec request is in flight or done; either way the VM is up
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	pw.Close()
	inv := invocation{stdout: out.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		inv.code = ee.ExitCode()
	}
	d := data(wantFailure(t, inv, taxonomy.KindInterrupted, taxonomy.FindingBuildLogGroupSurvives))
	if len(d["leaked"].([]any)) != 0 || d["microvmId"] == "" {
		t.Fatalf("%v", d)
	}
	runs, _, err := ledger.List(stateDir)
	if err != nil || len(runs) != 1 || !runs[0].Closed {
		t.Fatalf("the interrupted run's record is not closed: %v %+v", err, runs)
	}
}
