//go:build !linux

package emulator

import (
	"context"
	"io"
	"runtime"
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
