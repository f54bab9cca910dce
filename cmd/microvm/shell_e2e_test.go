package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// launchShellVM is launchProxied with the ingress connectors named.
func launchShellVM(t *testing.T, ingress ...string) *proxiedVM {
	t.Helper()
	emu := emulator.New(emulator.Options{VMs: emulator.AgentdLauncher(agentdBin(t), nil)})
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cpc, err := cplane.New(ctx, cplane.Options{Region: client.USEast1, Endpoint: url,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""), MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const token = "shell-e2e-agent-token"
	payload, err := cplane.NewRunHookPayload(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	var arns []string
	for _, n := range ingress {
		arns = append(arns, lambdamicrovms.ConnectorARN("us-east-1", n))
	}
	run, err := cpc.RunMicrovm(ctx, &lambdamicrovms.RunMicrovmInput{ImageIdentifier: aws.String(emu.AddImage("cli-shell")),
		RunHookPayload: aws.String(payload.Payload()), IngressNetworkConnectors: arns})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sandbox.WaitMicrovm(ctx, cpc, aws.ToString(run.MicrovmId), types.MicrovmStateRunning, cplane.WaitOptions{Interval: 10 * time.Millisecond, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &proxiedVM{emu: emu, cpURL: url, cpc: cpc, id: aws.ToString(got.MicrovmId), endpoint: aws.ToString(got.Endpoint), agentToken: token}
}

// TestShellCommandOnAPTY runs `microvm shell ID` on a pseudo-terminal
// against the real emulator, once through the platform's shell endpoint and
// once through agentd's PTY. Catches: stderr not saying which terminal it
// is, Ctrl-C handled locally (the CLI dies instead of the remote sleep, and
// no prompt comes back), a SIGWINCH that resizes nothing, the local
// terminal left raw after exit, and a session that does not end on exit.
func TestShellCommandOnAPTY(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ingress []string
		says    string
	}{
		{"platform", []string{"HTTP_INGRESS", taxonomy.ShellIngressConnector}, "through the platform's shell endpoint"},
		{"agentd", []string{"ALL_INGRESS"}, "through agentd's PTY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := launchShellVM(t, tc.ingress...)
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
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // bounds a CLI that never ends
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "shell", vm.id)
			cmd.Env = append(append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "AWS_REGION=us-east-1",
				"MICROVM_CONTROL_ENDPOINT=" + vm.cpURL, "MICROVM_ENDPOINT=" + vm.endpoint, "MICROVM_AGENT_TOKEN=" + vm.agentToken}, awsEnv()...), coverEnv()...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
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
			_, at := screen.waitFor(t, regexp.MustCompile(regexp.QuoteMeta(tc.says)), 0)
			typeLine("stty size; echo M$((6*7))\r")
			_, at = screen.waitFor(t, regexp.MustCompile(`M42`), at)
			if !strings.Contains(screen.String(), "31 101") {
				t.Errorf("stty size inside does not report the local 31 101:\n%q", screen.String())
			}

			if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 42, Cols: 123}); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Process.Signal(syscall.SIGWINCH)
			// The resize reaches the guest asynchronously: ask until the
			// new size shows, bounded.
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

			// The child prints a marker before it blocks, so the ^C
			// cannot land before it is the foreground job.
			typeLine("sh -c 'echo sta\"\"rted; exec sleep 300'\r")
			_, at = screen.waitFor(t, regexp.MustCompile(`started`), at)
			typeLine("\x03")
			typeLine("echo C$((2+2))-$?\r")
			_, _ = screen.waitFor(t, regexp.MustCompile(`C4-130`), at)
			typeLine("exit\r")
			err = cmd.Wait()
			waited = true
			if ctx.Err() != nil {
				t.Fatalf("the CLI was still running at the bound:\n%q", screen.String())
			}
			if err != nil {
				t.Errorf("shell exited %v:\n%q", err, screen.String())
			}
			after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
				t.Errorf("the local terminal was not restored: before %+v after %+v", before, after)
			}
		})
	}
}

// Catches: a shell on a pipe without --pipe (raw mode would fail and
// nobody types), --json let through, a missing id reaching the control
// plane; and --pipe not typing the pipe's bytes.
func TestShellCommandRefusalsAndPipe(t *testing.T) {
	vm := launchShellVM(t, "HTTP_INGRESS", taxonomy.ShellIngressConnector)
	env := append(awsEnv(), "AWS_REGION=us-east-1", "MICROVM_CONTROL_ENDPOINT="+vm.cpURL)
	wantFailure(t, cli(t, env, "", "--json", "shell", vm.id), taxonomy.KindInvalidArg, "")
	inv := cli(t, env, "echo hi\n", "shell", vm.id)
	if inv.code != int(taxonomy.KindInvalidArg.Exit()) || !strings.Contains(inv.stderr, "--pipe") {
		t.Errorf("shell on a pipe: exit %d, stderr %q", inv.code, inv.stderr)
	}
	inv = cli(t, env, "", "shell")
	if inv.code != int(taxonomy.KindInvalidArg.Exit()) {
		t.Errorf("shell with no id: exit %d, stderr %q", inv.code, inv.stderr)
	}
	inv = cli(t, env, "echo M$((6*7)); exit\n", "shell", "--pipe", vm.id)
	if inv.code != 0 || !strings.Contains(inv.stdout, "M42") || !strings.Contains(inv.stderr, "platform's shell endpoint") {
		t.Errorf("shell --pipe: exit %d, stdout %q, stderr %q", inv.code, inv.stdout, inv.stderr)
	}
}

// Catches: --direct sent to a control plane it does not have (a daemon
// reached directly has none), and agentd's terminal not being a PTY.
func TestShellCommandDirect(t *testing.T) {
	endpoint, token := startAgentd(t)
	env := []string{"MICROVM_ENDPOINT=" + endpoint, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	inv := cli(t, env, "tty; echo M$((6*7)); exit\n", "shell", "--pipe")
	if inv.code != 0 || !strings.Contains(inv.stdout, "M42") || !strings.Contains(inv.stdout, "/dev/pts/") || !strings.Contains(inv.stderr, "(--direct)") {
		t.Errorf("shell --direct --pipe: exit %d, stdout %q, stderr %q", inv.code, inv.stdout, inv.stderr)
	}
}

// Catches: a piped session that an interrupt cannot end (the read of the
// shell stays blocked, and the CLI hangs until killed), and one that exits
// as if the session had ended normally.
func TestShellCommandInterruptEndsAPipedSession(t *testing.T) {
	vm := launchShellVM(t, "HTTP_INGRESS", taxonomy.ShellIngressConnector)
	env := append(awsEnv(), "AWS_REGION=us-east-1", "MICROVM_CONTROL_ENDPOINT="+vm.cpURL)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	s := startCLI(t, 2*time.Minute, env, pr, "shell", "--pipe", vm.id)
	pr.Close()
	if _, err := pw.Write([]byte("echo M$((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	s.untilOutput(t, "M42")
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// An attached command's interrupt: the VM is left as it was, which
	// the CLI reports as ERR_TIMEOUT (hints.go), as for exec.
	if inv := s.wait(t); inv.code != int(taxonomy.KindTimeout.Exit()) || !strings.Contains(inv.stderr, "nothing on the VM was stopped") {
		t.Errorf("an interrupted shell exited %d, want %d; stderr %q", inv.code, taxonomy.KindTimeout.Exit(), inv.stderr)
	}
}
