//go:build unix

package localvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// UnsafeUnisolatedAgentdLauncher is the old, unconfined mode: a real
// agentd binary as a plain host process. It shares the host's filesystem,
// process table, hostname and network, so a guest's `rm -rf "$HOME"` deletes
// the caller's home. Use it only in a test that needs the host's view; every
// other caller wants AgentdLauncher, which confines the guest.
//
// One process per MicroVM, in its own session, with its own working
// directory (the image WORKDIR stand-in) and HOME, listening on a free port.
// The guest's hook port maps to that port; it has no other listener.
//
// The daemon gets the image's environmentVariables, PATH, AGENTD_PORT,
// AGENTD_REPAIR_IDENTITY=0 (repairing the machine identity rewrites files of
// the host it runs on, which only a confined guest may do) and
// AGENTD_LISTEN=127.0.0.1: the emulator reaches it only over loopback, so
// nothing else on the network can.
//
// stderr receives the daemon's log lines; nil discards them.
func UnsafeUnisolatedAgentdLauncher(bin string, stderr io.Writer) Launcher {
	if stderr == nil {
		stderr = io.Discard
	}
	return func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		if spec.Network != nil {
			// An unconfined guest shares the host's network: no policy
			// could hold it.
			return nil, &IsolationError{Missing: "a confined guest (AgentdLauncher) to hold a network policy; the unisolated launcher shares the host's network"}
		}
		dir, err := os.MkdirTemp("", "emulator-"+spec.MicrovmID+"-")
		if err != nil {
			return nil, err
		}
		// A free port can be taken between probing and agentd binding it;
		// a few attempts make that race irrelevant without looping forever.
		daemon := bin
		if spec.Daemon != "" {
			daemon = spec.Daemon // the agentd the image's artifact carries
		}
		var last error
		for attempt := 0; attempt < 3; attempt++ {
			g, err := startAgentd(ctx, daemon, dir, spec, stderr)
			if err == nil {
				return g, nil
			}
			last = err
			if ctx.Err() != nil {
				break
			}
		}
		_ = os.RemoveAll(dir)
		return nil, last
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail keeps the last bytes a process wrote, for the error of a guest that
// died before listening.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > 4096 {
		t.buf = t.buf[n-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

func startAgentd(ctx context.Context, bin, dir string, spec GuestSpec, stderr io.Writer) (*Guest, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	// Last, so an image cannot point the daemon at another port or address,
	// or turn the identity repair on against the host.
	env = append(env, "AGENTD_PORT="+strconv.Itoa(port), "AGENTD_REPAIR_IDENTITY=0", "AGENTD_LISTEN=127.0.0.1")

	cwd := dir
	if spec.Workdir != "" {
		// The guest's directory stands in for /, so the image's WORKDIR is
		// made inside it.
		cwd = filepath.Join(dir, filepath.Clean("/"+spec.Workdir))
		if err := os.MkdirAll(cwd, 0o700); err != nil {
			return nil, err
		}
	}
	var logTail tail
	cmd := exec.Command(bin)
	cmd.Dir, cmd.Env = cwd, env
	cmd.Stdout, cmd.Stderr = io.MultiWriter(stderr, &logTail), io.MultiWriter(stderr, &logTail)
	// Its own session: every process of the guest (agentd's children put
	// themselves in their own process groups, not sessions) is found by
	// session id for a freeze, a thaw or the final kill.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	sid := cmd.Process.Pid
	var once sync.Once
	stop := func() {
		once.Do(func() {
			signalSession(sid, syscall.SIGKILL)
			<-exited
			// Guest processes outside the daemon's own (orphans it spawned)
			// got the same SIGKILL; removing the directory is best effort.
			_ = os.RemoveAll(dir)
		})
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// Bounded: about ten seconds for the daemon to listen.
	for i := 0; i < 1000; i++ {
		select {
		case <-exited:
			return nil, fmt.Errorf("agentd exited before listening on %s: %s", addr, logTail.String())
		case <-ctx.Done():
			signalSession(sid, syscall.SIGKILL)
			<-exited
			return nil, ctx.Err()
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return &Guest{
				Ports:  map[int]string{spec.HookPort: addr},
				Freeze: func() error { return signalSession(sid, syscall.SIGSTOP) },
				Thaw:   func() error { return signalSession(sid, syscall.SIGCONT) },
				Stop:   stop,
				Exited: exited,
			}, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	signalSession(sid, syscall.SIGKILL)
	<-exited
	return nil, errors.New("agentd did not listen on " + addr + " within ten seconds")
}

// signalSession sends sig to the session leader and every process of its
// session. The leader goes first, so a stopped daemon spawns nothing the
// scan could miss. Where /proc is absent only the leader is signalled.
func signalSession(sid int, sig syscall.Signal) error {
	err := syscall.Kill(sid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = nil // already gone: its children may not be
	}
	entries, rerr := os.ReadDir("/proc")
	if rerr != nil {
		return err
	}
	for _, e := range entries {
		pid, perr := strconv.Atoi(e.Name())
		if perr != nil || pid == sid {
			continue
		}
		if sessionOf(pid) == sid {
			if kerr := syscall.Kill(pid, sig); kerr != nil && !errors.Is(kerr, syscall.ESRCH) && err == nil {
				err = kerr
			}
		}
	}
	return err
}

// sessionOf reads the session id from /proc/<pid>/stat, or -1. The command
// name is parenthesised and may hold spaces, so fields are counted after
// its closing parenthesis: state, ppid, pgrp, session.
func sessionOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return -1
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return -1
	}
	return n
}
