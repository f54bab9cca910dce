package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/taxonomy"
)

// ptyScreen collects what the CLI writes to its terminal.
type ptyScreen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *ptyScreen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits (bounded) until re matches the screen after from, and
// returns the match's submatches and where it ended.
func (s *ptyScreen) waitFor(t *testing.T, re *regexp.Regexp, from int) ([]string, int) {
	t.Helper()
	for range 600 { // 600 x 50ms bounds the wait, asserts nothing
		all := s.String()
		if from <= len(all) {
			if loc := re.FindStringSubmatchIndex(all[from:]); loc != nil {
				var subs []string
				for i := 0; i < len(loc); i += 2 {
					if loc[i] < 0 {
						subs = append(subs, "")
						continue
					}
					subs = append(subs, all[from+loc[i]:from+loc[i+1]])
				}
				return subs, from + loc[1]
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the terminal never showed %q; it shows:\n%q", re, s.String())
	return nil, 0
}

// TestExecTTYEndToEnd runs the built CLI on a pseudo-terminal against a real
// agentd, drives an interactive sh through it and checks the terminal on
// both sides. Catches: the child started on pipes (tty says "not a tty"),
// the local terminal left cooked during the session (ICANON still set, and
// the typed line would be sent only at Enter with a local echo) or left raw
// after it (termios differs from before), a SIGWINCH that resizes nothing
// (stty size stays at the first size), Ctrl-C handled locally (the CLI dies
// instead of the remote sleep), --timeout ending an interactive session,
// and a non-zero exit not mapped to 13.
func TestExecTTYEndToEnd(t *testing.T) {
	endpoint, token := startAgentd(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 31, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Lflag&unix.ICANON == 0 || before.Lflag&unix.ECHO == 0 {
		t.Fatalf("a fresh pty is not cooked (lflag %#x): the restore check below would mean nothing", before.Lflag)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // bounds a CLI that never ends
	defer cancel()
	// --timeout 1 is passed to show it does not cut the session short (it
	// lasts well over a second: see the wait before exit).
	cmd := exec.CommandContext(ctx, bin, "exec", "--tty", "--timeout", "1", "--", "sh")
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"),
		"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}, coverEnv()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	screen := &ptyScreen{}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			screen.mu.Lock()
			screen.buf.Write(b[:n])
			screen.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	typeLine := func(s string) {
		t.Helper()
		if _, err := ptmx.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	// The arithmetic is done by the remote shell, so the typed line's echo
	// never matches the answer.
	typeLine("tty; stty size; echo M$((6*7))\r")
	_, at := screen.waitFor(t, regexp.MustCompile(`M42`), 0)
	during, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if during.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("the local terminal is not raw during the session (lflag %#x)", during.Lflag)
	}
	out := screen.String()
	if !strings.Contains(out, "/dev/pts/") || strings.Contains(out, "not a tty") {
		t.Errorf("tty inside the exec does not report a terminal:\n%q", out)
	}
	if !strings.Contains(out, "31 101") {
		t.Errorf("stty size inside does not report the local size 31 101:\n%q", out)
	}

	// Resize: the kernel signals the CLI's process group (it leads the
	// pty's session); an explicit SIGWINCH as well, as a window system
	// would send. The resize reaches the remote asynchronously: ask again
	// until the new size shows, bounded.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 42, Cols: 123}); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGWINCH)
	size := regexp.MustCompile(`S(\d+)-(\d+)x(\d+)-E`)
	resized := false
	for i := 1; i <= 40 && !resized; i++ {
		typeLine(fmt.Sprintf("echo S$((0+%d))-$(stty size | tr ' ' x)-E\r", i))
		for {
			var m []string
			m, at = screen.waitFor(t, size, at)
			if m[1] == fmt.Sprint(i) {
				resized = m[2] == "42" && m[3] == "123"
				break
			}
		}
		if !resized {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !resized {
		t.Fatalf("stty size inside never showed 42 123 after the resize:\n%q", screen.String())
	}

	// Ctrl-C in raw mode is a byte for the remote terminal: it interrupts
	// the remote sleep, and the session goes on.
	typeLine("sleep 60\r")
	time.Sleep(500 * time.Millisecond) // lets sleep start; a miss only makes the ^C land at the prompt
	typeLine("\x03")
	typeLine("echo C$((2+2))\r")
	_, _ = screen.waitFor(t, regexp.MustCompile(`C4`), at)

	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond))) // past --timeout 1
	typeLine("echo L$((1+2))\r")
	_, _ = screen.waitFor(t, regexp.MustCompile(`L3`), at)
	typeLine("exit 3\r")
	err = cmd.Wait()
	waited = true
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the CLI was still running at the bound:\n%q", screen.String())
	}
	if code != int(taxonomy.KindExecFailed.Exit()) {
		t.Errorf("a remote exit 3 made the CLI exit %d, want %d:\n%q", code, taxonomy.KindExecFailed.Exit(), screen.String())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag || after.Cflag != before.Cflag {
		t.Errorf("the local terminal was not restored: before %+v after %+v", before, after)
	}
}

// TestExecTTYRefusals: --tty without a terminal on stdin, or with --json,
// is refused before anything starts. Catches: a --tty run on a pipe (raw
// mode fails mid-session, or the child runs with nobody to type), and
// --json let through to print a terminal's raw bytes where a JSON reader
// expects an envelope.
func TestExecTTYRefusals(t *testing.T) {
	// A closed port: a refusal that reached for the daemon would fail
	// differently (retryable), not with ERR_INVALID_ARG.
	env := []string{"MICROVM_ENDPOINT=" + closedPort(t), "MICROVM_AGENT_TOKEN=e2e-token-0123456789", "MICROVM_DIRECT=1"}
	m := wantFailure(t, cli(t, env, "", "--json", "exec", "--tty", "--", "sh"), taxonomy.KindInvalidArg, "")
	if msg := fmt.Sprint(m["error"]); !strings.Contains(msg, "--json") {
		t.Errorf("the --json refusal does not name --json: %q", msg)
	}
	inv := cli(t, env, "", "exec", "--tty", "--", "sh")
	if inv.code != int(taxonomy.KindInvalidArg.Exit()) || !strings.Contains(inv.stderr, taxonomy.KindInvalidArg.Code()) || !strings.Contains(inv.stderr, "terminal") {
		t.Errorf("--tty on a pipe: exit %d, want %d with %s naming the terminal\nstderr=%q", inv.code, taxonomy.KindInvalidArg.Exit(), taxonomy.KindInvalidArg.Code(), inv.stderr)
	}
}
