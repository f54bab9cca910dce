package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Each test here is one stumble of issue 18, shown gone against the real
// embedded emulator and a real agentd guest.

func localSandbox(t *testing.T) (*embedded.Emulator, *sandbox.Sandbox) {
	t.Helper()
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), sandbox.TeardownOptions{}) })
	return emu, sb
}

// Catches: Run after Terminate citing suspend-is-freeze (the stumble), or
// any finding at all: nothing was measured about a VM this process ended.
// Also catches files served by a terminated sandbox.
func TestRunAfterTerminateNamesTermination(t *testing.T) {
	ctx := context.Background()
	_, sb := localSandbox(t)
	if rep := sb.Terminate(ctx, sandbox.TeardownOptions{}); !rep.Clean() {
		t.Fatal(rep)
	}
	_, err := sb.Run(ctx, []string{"true"}, client.RunOptions{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Finding() != "" || !strings.Contains(err.Error(), "terminated") || !strings.Contains(err.Error(), "launch a new") {
		t.Fatalf("Run after Terminate: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/etc/hostname"); !strings.Contains(fmtErr(err), "terminated") {
		t.Fatalf("ReadFile after Terminate: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Catches: a missing file reported without its path or without a way to
// tell it apart from other protocol refusals (the stumble was "HTTP 404: no
// such file"). The kind stays ERR_PROTOCOL: the exit table is the
// reference's and folds NotFound into it on purpose; the wire kind and
// fs.ErrNotExist are how a program tells.
func TestReadMissingFileNamesPath(t *testing.T) {
	_, sb := localSandbox(t)
	_, err := sb.ReadFile(context.Background(), "/no/such/dir/file.txt")
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want fs.ErrNotExist, got %v", err)
	}
	if w, ok := ce.WireKind(); !ok || w != taxonomy.WireNotFound {
		t.Fatalf("wire kind %v %v", w, ok)
	}
	if !strings.Contains(err.Error(), `"/no/such/dir/file.txt"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("the message does not name the path: %v", err)
	}
}

// Catches: a spawn failure with no hint (the stumble: Protocol, no hint) —
// the message must quote the command and say what to fix; and the slug
// must survive so a program can branch on it.
func TestSpawnFailedHint(t *testing.T) {
	_, sb := localSandbox(t)
	_, err := sb.Run(context.Background(), []string{"/no/such/program", "x"}, client.RunOptions{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Slug() != "spawn_failed" {
		t.Fatalf("want spawn_failed, got %v", err)
	}
	if !strings.Contains(err.Error(), "/no/such/program") || !strings.Contains(err.Error(), "PATH") {
		t.Fatalf("no hint: %v", err)
	}
	if ce.Retryable() {
		t.Fatal("a spawn failure reads as retryable")
	}
}

// Catches: a 401 without a hint (the stumble), and Attach refusing a wrong
// token by probing (it must not probe); the first call answers Credentials
// naming the agent token.
func TestWrongTokenHint(t *testing.T) {
	ctx := context.Background()
	emu, sb := localSandbox(t)
	other, err := emu.Attach(ctx, sb.ID(), strings.Repeat("0", 64), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Run(ctx, []string{"true"}, client.RunOptions{})
	if client.KindOf(err) != taxonomy.KindCredentials || !strings.Contains(err.Error(), "AgentToken") {
		t.Fatalf("want Credentials naming the agent token, got %v", err)
	}
	// The right token works, and sees what the launching sandbox wrote.
	if err := sb.WriteFile(ctx, "/tmp/x", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	right, err := emu.Attach(ctx, sb.ID(), sb.AgentToken(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := right.ReadFile(ctx, "/tmp/x"); err != nil || string(b) != "1" {
		t.Fatalf("%q %v", b, err)
	}
	if !right.TokenInstalled() || right.BootstrapCount() != 1 || right.Lifecycle() != sandbox.Running {
		t.Fatalf("attached model: %v %v %v", right.TokenInstalled(), right.BootstrapCount(), right.Lifecycle())
	}
}

// Catches: Attach to a terminated VM handing back a sandbox that fails
// later and obscurely; and Attach sending anything to the VM (it re-delivers
// nothing: the token was installed once).
func TestAttachTerminatedRefused(t *testing.T) {
	ctx := context.Background()
	emu, sb := localSandbox(t)
	sb.Terminate(ctx, sandbox.TeardownOptions{})
	_, err := emu.Attach(ctx, sb.ID(), sb.AgentToken(), sandbox.Options{})
	if client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), "TERMINATED") {
		t.Fatalf("want a refusal naming TERMINATED, got %v", err)
	}
	if _, err := emu.Attach(ctx, "", "", sandbox.Options{}); client.KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("empty id: %v", err)
	}
}

// Catches: Shell with several argv elements silently running only the first
// (the stumble printed a bare newline); the refusal says how to join them.
// And ExitStatus for a signal-ended child reading as 0.
func TestShellArgvAndExitStatus(t *testing.T) {
	ctx := context.Background()
	_, sb := localSandbox(t)
	_, err := sb.Run(ctx, []string{"echo", "a", "&&", "echo", "b"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), `"echo a && echo b"`) {
		t.Fatalf("want the refusal with the joined string, got %v", err)
	}
	r, err := sb.Run(ctx, []string{"echo a && echo b"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil || r.Stdout != "a\nb\n" || r.ExitStatus != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = sb.Run(ctx, []string{"kill -9 $$"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil || r.Signal == nil || r.ExitStatus != 128+9 {
		t.Fatalf("a SIGKILLed child: status %d signal %v err %v", r.ExitStatus, r.Signal, err)
	}
}

// Catches: the daemon's timeout and the client's deadline mixed up again.
// DaemonTimeout has agentd end the child (the record says so); ClientTimeout
// stops waiting with ERR_TIMEOUT and leaves the child running.
func TestDaemonTimeoutVsClientTimeout(t *testing.T) {
	ctx := context.Background()
	_, sb := localSandbox(t)
	r, err := sb.Run(ctx, []string{"sleep", "30"}, client.RunOptions{StartOptions: client.StartOptions{DaemonTimeout: 300e6}})
	if err != nil || r.Success() || r.Running() {
		t.Fatalf("daemon timeout: %+v %v", r, err)
	}
	_, err = sb.Run(ctx, []string{"sleep", "30"}, client.RunOptions{ClientTimeout: 300e6})
	if client.KindOf(err) != taxonomy.KindTimeout {
		t.Fatalf("client timeout: %v", err)
	}
}

// Catches: DeleteImage on an image this run did not build reporting
// not_asked (the stumble), and the image being deleted anyway.
func TestDeleteImageNotOwned(t *testing.T) {
	ctx := context.Background()
	emu, sb := localSandbox(t)
	rep := sb.Terminate(ctx, sandbox.TeardownOptions{DeleteImage: true})
	if rep.ImageDeleted != sandbox.ImageNotOwned || !rep.Clean() {
		t.Fatalf("%+v", rep)
	}
	for _, r := range emu.Server.Requests() {
		if r.Method == "DELETE" && strings.Contains(r.Path, "/images/") {
			t.Fatalf("an image it does not own was deleted: %s", r.Path)
		}
	}
	if rep := sb.Terminate(ctx, sandbox.TeardownOptions{}); rep.ImageDeleted != sandbox.ImageNotAsked {
		t.Fatalf("not asked: %+v", rep)
	}
}

// Catches: the caller having to time the run or name the size class; a
// suspend cycle not counted; suspended time billed as running.
func TestUsageFromPlatform(t *testing.T) {
	ctx := context.Background()
	_, sb := localSandbox(t)
	if err := sb.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	sb.Terminate(ctx, sandbox.TeardownOptions{})
	u, size, err := sb.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if size != client.DefaultSizeClass() || u.Cycles != 1 || !u.Launched || u.Running.IsZero() || u.Suspended.IsZero() {
		t.Fatalf("usage %+v size %v", u, size)
	}
}

// Catches: reattach that only works inside the launching process (the
// stumble: the token was never shown, so no other process could reach the
// VM). A second process — this test binary run again — gets nothing but the
// emulator URL, the MicroVM id and the agent token, attaches, and reads
// what the first process wrote.
func TestAttachFromAnotherProcess(t *testing.T) {
	if url := os.Getenv("SANDBOX_TEST_ATTACH_URL"); url != "" {
		ctx := context.Background()
		cpc, err := cplane.New(ctx, cplane.Options{Region: client.USEast1, Endpoint: url, Credentials: embedded.Credentials()})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := sandbox.Attach(ctx, cpc, os.Getenv("SANDBOX_TEST_ATTACH_ID"), os.Getenv("SANDBOX_TEST_ATTACH_TOKEN"), sandbox.Options{Wait: embedded.WaitOptions(0)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := sb.ReadFile(ctx, "/tmp/from-parent")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("child read %q\n", b)
		return
	}
	ctx := context.Background()
	emu, sb := localSandbox(t)
	if emu.Region() != client.USEast1 {
		t.Fatalf("region %v", emu.Region())
	}
	if err := sb.WriteFile(ctx, "/tmp/from-parent", []byte("parent wrote this"), 0); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttachFromAnotherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SANDBOX_TEST_ATTACH_URL="+emu.URL, "SANDBOX_TEST_ATTACH_ID="+sb.ID(), "SANDBOX_TEST_ATTACH_TOKEN="+sb.AgentToken())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `child read "parent wrote this"`) {
		t.Fatalf("the other process could not attach: %v\n%s", err, out)
	}
}

// ReadFile returns a file of exactly MaxReadFileBytes whole and refuses one
// byte more. Catches: the read limit one short (MaxReadFileBytes-1 instead
// of +1: a file at the cap, or over it, comes back cut and without an
// error), and the cap's comparison made >= (a file of exactly the cap
// refused).
func TestReadFileCapEdges(t *testing.T) {
	ctx := context.Background()
	_, sb := localSandbox(t)
	const limit = sandbox.MaxReadFileBytes
	r, err := sb.Run(ctx, []string{"sh", "-c", fmt.Sprintf("d=$(mktemp -d) && head -c %d /dev/zero > $d/at && head -c %d /dev/zero > $d/over && echo $d", limit, limit+1)}, client.RunOptions{})
	if err != nil || r.ExitStatus != 0 {
		t.Fatalf("making the files: %+v %v", r, err)
	}
	dir := strings.TrimSpace(r.Stdout)
	t.Cleanup(func() { sb.Run(context.Background(), []string{"rm", "-rf", dir}, client.RunOptions{}) })
	if b, err := sb.ReadFile(ctx, dir+"/at"); err != nil || len(b) != limit {
		t.Fatalf("a file of exactly the cap: %d bytes, %v", len(b), err)
	}
	b, err := sb.ReadFile(ctx, dir+"/over")
	if client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("over %d bytes", limit)) || b != nil {
		t.Fatalf("a file one byte over the cap: %d bytes, %v", len(b), err)
	}
}
