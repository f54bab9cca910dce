//go:build !linux

package localvm

import (
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
)

// Init returns at once: only Linux re-executes this binary as a guest.
func Init() {}

// CheckIsolation reports that this host cannot confine a guest: the
// emulator's isolation is built from Linux namespaces.
func CheckIsolation() error {
	return &IsolationError{Missing: "Linux namespaces (this host runs " + runtime.GOOS + ")"}
}

// CheckIsolationFor is CheckIsolation.
func CheckIsolationFor(agentd string) error { return CheckIsolation() }

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

// RunStep refuses on this host: a build step is a confined guest.
func RunStep(ctx context.Context, s StepGuest) (*StepResult, error) {
	return nil, CheckIsolation()
}

// StepGuest is one RUN to perform (see the Linux build).
type StepGuest struct {
	Root     string
	Cmd      StepCommand
	Egress   bool
	Output   io.Writer
	Writable int64
	Collect  func(upper string, idOffset int) error
}

// StepResult is how a step ended.
type StepResult struct {
	Exit int
	Full bool
}

// StateDirPrefix names a temporary directory of this emulator.
func StateDirPrefix(what string) string {
	return "emulator-" + strconv.Itoa(os.Getpid()) + "-" + what + "-"
}

// SweepStaleStateOnce sweeps nothing: only Linux runs confined guests.
func SweepStaleStateOnce() {}

// CheckEgress reports that this host cannot give a guest egress: there is
// no guest to give it to.
func CheckEgress() error { return CheckIsolation() }

// CheckNetworkPolicy reports that this host cannot give a guest a network
// under a policy: there is no confined guest to give one.
func CheckNetworkPolicy() error { return CheckIsolation() }
