//go:build linux

package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// A build step's RUN is a guest like any other (the same namespaces,
// seccomp filter, dropped capabilities, size-class limits and, only with
// egress, a user-mode network), started through the same init. It differs
// in two things only: the init runs the step's command as the image's user
// instead of agentd, and the overlay's upper layer is a directory on the
// host's disk rather than the guest's tmpfs, so the step's changes (its
// layer) are there for the builder once the guest has exited.

// stepGuest is one RUN to perform.
type stepGuest struct {
	root   string // the image's root before the step: the lower layer
	cmd    stepCommand
	egress bool
	output io.Writer // the step's stdout and stderr
}

// stepResult is what a finished step left: its exit status and, in upper,
// its changes, owned by host ids that idOffset is to be subtracted from
// (a root-started guest's range) to get the image's ids.
type stepResult struct {
	exit     int
	upper    string
	idOffset int
	cleanup  func()
}

// runStepGuest runs s in a confined guest and waits for it. An error means
// the step could not be run at all; a command that ran and failed is a
// result with a non-zero exit.
func runStepGuest(ctx context.Context, s stepGuest) (*stepResult, error) {
	if err := CheckIsolation(); err != nil {
		return nil, err
	}
	if s.egress {
		if err := CheckEgress(); err != nil {
			return nil, err
		}
	}
	m := guestIDMapping()
	sweepStaleStateOnce()
	dir, err := os.MkdirTemp("", stateDirPrefix("build-step"))
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = removeState(dir) }
	res := &stepResult{upper: filepath.Join(dir, "upper"), cleanup: cleanup}
	// The image's root is mounted under dir while the step starts: it is
	// detached before anything removes dir, or the removal would descend
	// into the image and delete it.
	var image string
	unmount := func() {
		if image != "" {
			_ = unix.Unmount(image, unix.MNT_DETACH)
			image = ""
		}
	}
	defer unmount()
	fail := func(err error) (*stepResult, error) { unmount(); cleanup(); return nil, err }
	for _, d := range []string{"rw", "image", "upper", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return fail(err)
		}
	}
	if m.byRoot {
		res.idOffset = m.ownerUID
		for _, d := range []string{"", "upper", "work"} {
			if err := os.Chown(filepath.Join(dir, d), m.ownerUID, m.ownerGID); err != nil {
				return fail(err)
			}
		}
	}
	cfg := guestConfig{
		State: dir, WritableBytes: 16 << 20, ImageRoot: s.root, Hostname: "microvm-build",
		Inherited: inheritedFDs(), Step: &s.cmd, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"),
	}
	if m.byRoot {
		mounted, err := bindImageRoot(s.root, dir, m, true)
		if err != nil {
			return fail(err)
		}
		image, cfg.ImageRoot = mounted, mounted
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return fail(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fail(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer w.Close()
	initExe, err := sealedSelf()
	if err != nil {
		r.Close()
		return fail(err)
	}
	defer initExe.Close()
	cmd := exec.Command(guestInitPath)
	cmd.Args = []string{guestInitArg0}
	cmd.Env = guestInitEnv
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = s.output, s.output
	// fd 3 the config and lifeline; no daemon and no dial channel; fd 6
	// the init's own binary.
	cmd.ExtraFiles = []*os.File{r, null, null, initExe}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: guestCloneFlags, Setsid: true}
	m.apply(cmd.SysProcAttr)
	err = startOwnedBy(cmd, m)
	r.Close()
	if err != nil {
		return fail(isolationError("permission to create the build step's namespaces", err))
	}
	// The guest's mount namespace holds its own copy of the image's mount.
	unmount()
	leader := cmd.Process.Pid
	limits := applyLimits(GuestSpec{MicrovmID: "build"}, leader)
	defer limits.remove()
	var stopEgress func()
	if s.egress {
		if stopEgress, err = startEgress(leader, s.output); err != nil {
			_ = syscall.Kill(leader, syscall.SIGKILL)
			_ = cmd.Wait()
			return fail(err)
		}
		defer stopEgress()
	}
	if _, err := w.Write(append(raw, '\n')); err != nil {
		_ = syscall.Kill(leader, syscall.SIGKILL)
		_ = cmd.Wait()
		return fail(fmt.Errorf("configuring the build step's init: %w", err))
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(leader, syscall.SIGKILL)
		case <-done:
		}
	}()
	werr := cmd.Wait()
	close(done)
	unmount()
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	var exit *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &exit):
		res.exit = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.exit = 128 + int(ws.Signal())
		}
	default:
		return fail(werr)
	}
	return res, nil
}
