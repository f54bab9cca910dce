package emulator

import (
	"github.com/microvms/microvms/imagebuild"
	"github.com/microvms/microvms/localvm"
)

// The guest runtime is package localvm; the emulator only drives it through
// the Launcher seam. These names forward to it so the emulator's callers
// keep one import for "a control plane whose MicroVMs are local guests".

// Launcher starts the guest of one MicroVM (localvm.Launcher). With
// Options.VMs set, a MicroVM is a real guest: RunMicrovm starts it, delivers
// the run hook, and serves its endpoint through a token-checking proxy.
// Without it, MicroVMs are records whose endpoint points nowhere.
type Launcher = localvm.Launcher

// GuestSpec is what a Launcher is asked to start (localvm.GuestSpec).
type GuestSpec = localvm.GuestSpec

// Guest is one running MicroVM as its Launcher reports it (localvm.Guest).
type Guest = localvm.Guest

// LimitsReport says which of a local guest's limits hold (localvm.LimitsReport).
type LimitsReport = localvm.LimitsReport

// IsolationError is a host's refusal to confine a guest (localvm.IsolationError).
type IsolationError = localvm.IsolationError

var (
	// AgentdLauncher is localvm.AgentdLauncher: each guest confined in its
	// own namespaces.
	AgentdLauncher = localvm.AgentdLauncher
	// UnsafeUnisolatedAgentdLauncher is localvm.UnsafeUnisolatedAgentdLauncher.
	UnsafeUnisolatedAgentdLauncher = localvm.UnsafeUnisolatedAgentdLauncher
	// CheckIsolation is localvm.CheckIsolation.
	CheckIsolation = localvm.CheckIsolation
	// CheckIsolationFor is localvm.CheckIsolationFor.
	CheckIsolationFor = localvm.CheckIsolationFor
	// ProbeLimits is localvm.ProbeLimits.
	ProbeLimits = localvm.ProbeLimits
	// CheckEgress is localvm.CheckEgress.
	CheckEgress = localvm.CheckEgress
	// CheckNetworkPolicy is localvm.CheckNetworkPolicy.
	CheckNetworkPolicy = localvm.CheckNetworkPolicy
	// GuestInitBeside is localvm.GuestInitBeside.
	GuestInitBeside = localvm.GuestInitBeside
)

// The Dockerfile executor is package imagebuild; the emulator reaches it
// through Options.Build and these forwarded names.

// BuildEvent is one step of a local Dockerfile build (imagebuild.BuildEvent).
type BuildEvent = imagebuild.BuildEvent

var (
	// HostMachine is imagebuild.HostMachine.
	HostMachine = imagebuild.HostMachine
	// UnperformedSteps is imagebuild.UnperformedSteps.
	UnperformedSteps = imagebuild.UnperformedSteps
)
