package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/client/ledger"
)

// readmeBlock is the first ```sh block after heading in the README.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), heading+"\n")
	if !ok {
		t.Fatalf("the README has no %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("no sh block after %q", heading)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("an unterminated sh block")
	}
	return block
}

// The README's kept-MicroVM walkthrough, verbatim, in a directory laid out
// as a fresh clone after `make build` (bin/microvm, bin/agentd), with no AWS
// credentials and no value a reader would have to copy by hand.
//
// Catches: a placeholder (EP, TOKEN, ID) back in the walkthrough, an
// attached command that needs more than the id again, a kept MicroVM that is
// not remembered or not forgotten at terminate, `run --keep` without its id
// on stdout, and any step of the walkthrough that no longer runs.
func TestReadmeKeptWalkthroughRunsVerbatim(t *testing.T) {
	script := readmeBlock(t, "### A kept MicroVM, across commands")
	for _, placeholder := range []string{"<", " EP ", "TOKEN ", " ID "} {
		if strings.Contains(script, placeholder) {
			t.Fatalf("the walkthrough has a placeholder %q:\n%s", placeholder, script)
		}
	}
	clone := t.TempDir()
	if err := os.Mkdir(filepath.Join(clone, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for dst, src := range map[string]string{"microvm": bin, "agentd": agentdBin(t)} {
		b, err := os.ReadFile(src)
		if err != nil || os.WriteFile(filepath.Join(clone, "bin", dst), b, 0o755) != nil {
			t.Fatalf("copying %s: %v", src, err)
		}
	}
	stateDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = clone
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"),
		"MICROVM_STATE_DIR=" + stateDir, "MICROVM_ARTIFACT_DIR=" + t.TempDir()}, coverEnv()...)
	// Its own process group: a step that fails leaves the backgrounded
	// emulator running, and the cleanup stops it with every guest.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		}
	})
	if err := cmd.Run(); err != nil {
		t.Fatalf("the walkthrough failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	for _, want := range []string{"Linux\n/workspace\n", "carried across a freeze\n", "is SUSPENDED", "is RUNNING", "terminated microvm-", "(TERMINATED)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("stdout lacks %q:\n%s\nstderr:\n%s", want, out.String(), errb.String())
		}
	}
	if left, _ := os.ReadDir(filepath.Join(stateDir, "kept")); len(left) != 0 {
		t.Fatalf("terminate left the kept record: %v", left)
	}
	runs, _, err := ledger.List(stateDir)
	if err != nil || len(runs) != 1 || !runs[0].Closed {
		t.Fatalf("the ledger does not hold the kept run closed: %v %+v", err, runs)
	}
}
