//go:build linux

package localvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/localvm/guestinit"

	"golang.org/x/sys/unix"
)

// A build step's RUN is a guest like any other (the same namespaces,
// seccomp filter, dropped capabilities, size-class limits and, only with
// egress, a user-mode network), started through the same init. It differs
// in two things only: the init runs the step's command as the image's user
// instead of agentd, and once the command has ended the init holds the
// step's upper layer (its changes) for the builder: it kills what the step
// left, reports the step's status on its control socket and makes the
// layer its cwd, which the builder reads as /proc/<init>/cwd before letting
// the guest go.
//
// The upper layer is on the guest's writable tmpfs, the run-time guest's
// bound (LOCAL_GUEST_WRITABLE_MIB) large, in the guest's own mount
// namespace: a step that fills it gets ENOSPC, and the host's disk sees
// none of its writes until the builder copies the (bounded) layer into the
// cache. A tmpfs is the one bounded filesystem a rootless emulator can
// mount (in the guest's user namespace); a loop device or a quota needs the
// host's root, so root and rootless steps have the same bound the same
// way. Its pages count against the step's memory limit, as a guest's do.

// StepGuest is one RUN to perform.
type StepGuest struct {
	Root   string // the image's root before the step: the lower layer
	Cmd    StepCommand
	Egress bool
	Output io.Writer // the step's stdout and stderr
	// writable bounds the step's upper layer, in bytes.
	Writable int64
	// collect takes the step's changes when its command exited 0: upper
	// is the layer, owned by host ids idOffset is to be subtracted from
	// (a root-started guest's range) to get the image's ids. It runs while
	// the layer is held, before RunStep returns.
	Collect func(upper string, idOffset int) error
}

// StepResult is how a step ended: its exit status and, for a failure,
// whether its writable layer was full.
type StepResult struct {
	Exit int
	Full bool
}

// RunStep runs s in a confined guest and waits for it. An error means
// the step could not be run at all or its changes could not be taken; a
// command that ran and failed is a result with a non-zero exit.
func RunStep(ctx context.Context, s StepGuest) (*StepResult, error) {
	if err := CheckIsolation(); err != nil {
		return nil, err
	}
	if s.Egress {
		if err := CheckEgress(); err != nil {
			return nil, err
		}
	}
	m := guestIDMapping()
	SweepStaleStateOnce()
	dir, err := os.MkdirTemp("", StateDirPrefix("build-step"))
	if err != nil {
		return nil, err
	}
	cleanup := func() { _ = removeState(dir) }
	defer cleanup()
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
	for _, d := range []string{"rw", "image"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	idOffset := 0
	if m.byRoot {
		idOffset = m.ownerUID
		if err := os.Chown(dir, m.ownerUID, m.ownerGID); err != nil {
			return nil, err
		}
	}
	writable := s.Writable
	if writable <= 0 {
		writable = int64(taxonomy.LocalGuestWritableMiB) << 20
	}
	cfg := guestinit.Config{
		State: dir, WritableBytes: writable, ImageRoot: s.Root, Hostname: "microvm-build",
		Inherited: inheritedFDs(), Step: &s.Cmd,
	}
	if cfg.Filter, err = guestFilter(); err != nil {
		return nil, isolationError("a syscall table for this architecture", err)
	}
	if m.byRoot {
		mounted, err := bindImageRoot(s.Root, dir, m, true)
		if err != nil {
			return nil, err
		}
		image, cfg.ImageRoot = mounted, mounted
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	// fd 3 of the init is a socket, not a pipe: the config goes in, the
	// step's status comes back, and its end of file either way is the
	// other side gone.
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "step-control"), os.NewFile(uintptr(pair[1]), "step-control-guest")
	defer ours.Close()
	initExe, err := sealedSelf()
	if err != nil {
		theirs.Close()
		return nil, err
	}
	defer initExe.Close()
	cmd := exec.Command(guestinit.InitPath)
	cmd.Args = []string{GuestInitArg0}
	cmd.Env = guestInitEnv
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = s.Output, s.Output
	// fd 3 the config, status and lifeline; no daemon and no dial channel;
	// fd 6 the init's own binary.
	cmd.ExtraFiles = []*os.File{theirs, null, null, initExe}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: guestCloneFlags, Setsid: true}
	m.apply(cmd.SysProcAttr)
	err = startOwnedBy(cmd, m)
	theirs.Close()
	if err != nil {
		return nil, isolationError("permission to create the build step's namespaces", err)
	}
	// The guest's mount namespace holds its own copy of the image's mount.
	unmount()
	leader := cmd.Process.Pid
	kill := func() { _ = syscall.Kill(leader, syscall.SIGKILL) }
	limits := applyLimits(GuestSpec{MicrovmID: "build"}, leader)
	defer limits.remove()
	waited := false
	defer func() {
		if !waited {
			kill()
			_ = cmd.Wait()
		}
	}()
	if s.Egress {
		stopEgress, err := startEgress(leader, s.Output)
		if err != nil {
			return nil, err
		}
		defer stopEgress()
	}
	// The config, then the empty line that lets the init start the step:
	// it was placed in its cgroups above.
	if _, err := ours.Write(append(raw, '\n', '\n')); err != nil {
		return nil, fmt.Errorf("configuring the build step's init: %w", err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			kill()
			_ = ours.Close() // unblocks the status read
		case <-done:
		}
	}()
	// Bounded: a status is a few digits, and ReadSlice stops at the
	// buffer's end rather than growing it.
	line, rerr := bufio.NewReaderSize(ours, 64).ReadSlice('\n')
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res := &StepResult{}
	if rerr != nil {
		// The init ended without reporting: it could not set the step up
		// (its reason is on the step's output), or it was killed; or it
		// said more than a status, and ends now. A dead init's status is
		// kept by its zombie whatever the kill.
		if !errors.Is(rerr, io.EOF) {
			kill()
		}
		werr := cmd.Wait()
		waited = true
		var exit *exec.ExitError
		if !errors.As(werr, &exit) {
			return nil, fmt.Errorf("the build step's init ended without a status: %v", werr)
		}
		res.Exit = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Exit = 128 + int(ws.Signal())
		}
		return res, nil
	}
	if res.Exit, err = strconv.Atoi(strings.TrimSpace(string(line))); err != nil {
		return nil, fmt.Errorf("the build step's init reported %q", line)
	}
	// The init's cwd is the layer; nothing of the guest runs any more.
	upper := fmt.Sprintf("/proc/%d/cwd/.", leader)
	if res.Exit != 0 {
		var st unix.Statfs_t
		if unix.Statfs(upper, &st) == nil && st.Bavail == 0 {
			res.Full = true
		}
		return res, nil
	}
	if s.Collect != nil {
		if err := s.Collect(upper, idOffset); err != nil {
			return nil, err
		}
	}
	return res, nil
}
