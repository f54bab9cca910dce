//go:build !linux

package emulator

import (
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
)

// CheckIsolation reports that this host cannot confine a guest: the
// emulator's isolation is built from Linux namespaces.
func CheckIsolation() error {
	return &IsolationError{Missing: "Linux namespaces (this host runs " + runtime.GOOS + ")"}
}

// AgentdLauncher refuses every launch on this host: there are no Linux
// namespaces to confine the guest in, and an unconfined guest is only ever
// started through UnsafeUnisolatedAgentdLauncher, by name.
func AgentdLauncher(bin string, stderr io.Writer) Launcher {
	return func(ctx context.Context, spec GuestSpec) (*Guest, error) {
		return nil, CheckIsolation()
	}
}

// ProbeLimits reports that no limit can be set on this host: a local guest
// needs Linux.
func ProbeLimits() LimitsReport {
	return LimitsReport{Missing: []string{"memory, pids and cpu: local guests need Linux (this host runs " + runtime.GOOS + ")"}}
}

// runStepGuest refuses on this host: a build step is a confined guest.
func runStepGuest(ctx context.Context, s stepGuest) (*stepResult, error) {
	return nil, CheckIsolation()
}

type stepGuest struct {
	root     string
	cmd      stepCommand
	egress   bool
	output   io.Writer
	writable int64
	collect  func(upper string, idOffset int) error
}

type stepCommand struct {
	Argv     []string
	Env      []string
	Dir      string
	UID, GID uint32
	Groups   []uint32
}

type stepResult struct {
	exit int
	full bool
}

// stateDirPrefix names a temporary directory of this emulator.
func stateDirPrefix(what string) string {
	return "emulator-" + strconv.Itoa(os.Getpid()) + "-" + what + "-"
}

// sweepStaleStateOnce sweeps nothing: only Linux runs confined guests.
func sweepStaleStateOnce() {}
