package sandbox

import (
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Lifecycle is a MicroVM's state as the sandbox last knew it. It is the
// SDK's MicrovmState (client/lambdamicrovms/types), the type every
// GetMicrovm answer carries, so no conversion sits between the two; the
// emulator's generated copy of the enum is not this package's to name.
type Lifecycle = types.MicrovmState

// The lifecycle values, in the platform's order.
const (
	Pending     = types.MicrovmStatePending
	Running     = types.MicrovmStateRunning
	Suspending  = types.MicrovmStateSuspending
	Suspended   = types.MicrovmStateSuspended
	Terminating = types.MicrovmStateTerminating
	Terminated  = types.MicrovmStateTerminated
)

// model is the specification's state model and nothing else: five variables
// and the transitions between them. Sandbox drives it at the points where the
// platform confirms each step; every refusal happens here, before a call.
// Keeping it free of I/O is what lets the property tests walk it at random.
type model struct {
	lifecycle      Lifecycle
	tokenInstalled bool
	imageExists    bool
	wasTerminated  bool
	bootstrapCount int
}

func newModel() model { return model{lifecycle: Pending} }

func refuse(f taxonomy.FindingID, format string, args ...any) error {
	return client.Errorf(taxonomy.KindInvalidArg, f, format, args...)
}

// launchAccepted: RunMicrovm answered. The VM is PENDING and its image
// exists (the service launched from it).
func (m *model) launchAccepted() {
	if m.lifecycle == Pending && !m.wasTerminated {
		m.imageExists = true
	}
}

// bootstrapped: the platform reports RUNNING for the first time, which it
// does only after the run hook answered 200 — so the token is installed.
// It happens at most once per VM: a resume reaches RUNNING through resumed.
func (m *model) bootstrapped() error {
	if m.lifecycle != Pending || m.bootstrapCount != 0 || !m.imageExists {
		return refuse("", "the agent token can be installed only once, on a PENDING VM launched from an existing image (state %s, installs %d)", m.lifecycle, m.bootstrapCount)
	}
	m.lifecycle, m.tokenInstalled = Running, true
	m.bootstrapCount++
	return nil
}

// diedBeforeRunning: the platform reports a terminal state before RUNNING.
func (m *model) diedBeforeRunning() {
	m.lifecycle, m.wasTerminated = Terminated, true
}

// suspend: a suspend call may be sent only from RUNNING.
func (m *model) suspend() error {
	if m.lifecycle != Running {
		return refuse(taxonomy.FindingSuspendIsFreeze, "a suspend is sent only to a RUNNING MicroVM; this one is %s", m.lifecycle)
	}
	m.lifecycle = Suspending
	return nil
}

// suspended: the platform reports suspension complete.
func (m *model) suspended() {
	if m.lifecycle == Suspending {
		m.lifecycle = Suspended
	}
}

// resume: a resume call may be sent only from SUSPENDED. It changes nothing
// yet: the VM is RUNNING again only when the platform says so.
func (m *model) resume() error {
	if m.lifecycle != Suspended {
		return refuse(taxonomy.FindingSuspendIsFreeze, "a resume is sent only to a SUSPENDED MicroVM; this one is %s", m.lifecycle)
	}
	return nil
}

// resumed: the platform reports RUNNING after a resume. The token installed
// at launch survives the freeze, so nothing is re-delivered and the install
// count does not move.
func (m *model) resumed() {
	if m.lifecycle == Suspended && !m.wasTerminated {
		m.lifecycle = Running
	}
}

// terminate: a terminate call is accepted from PENDING, RUNNING and SUSPENDED.
// Repeating it on a VM already going away is not an error; from SUSPENDING the
// caller waits for the suspend to land first.
func (m *model) terminate() (send bool, err error) {
	if !m.imageExists {
		return false, nil // nothing was launched, so there is nothing to end
	}
	switch m.lifecycle {
	case Pending, Running, Suspended:
		m.lifecycle, m.wasTerminated = Terminating, true
		return true, nil
	case Terminating, Terminated:
		return false, nil
	}
	return false, refuse(taxonomy.FindingSuspendIsFreeze, "a terminate cannot be sent while the MicroVM is %s; wait for SUSPENDED", m.lifecycle)
}

// terminated: the platform reports TERMINATED (after our terminate, or
// because its idle policy ended a suspended VM). There is no way back.
func (m *model) terminated() {
	m.lifecycle, m.wasTerminated = Terminated, true
}

// invariant reports the first of the specification's constraints m breaks.
func (m model) invariant() string {
	switch {
	case m.bootstrapCount > 1:
		return "bootstrap_count <= 1"
	case m.wasTerminated && m.lifecycle == Running:
		return "not (was_terminated and vm_state = RUNNING)"
	case m.lifecycle == Suspending && (m.wasTerminated || !m.tokenInstalled):
		return "not (vm_state = SUSPENDING and (was_terminated or not token_installed))"
	case m.tokenInstalled != (m.bootstrapCount == 1):
		return "token_installed iff bootstrap_count = 1"
	case (m.lifecycle == Terminating || m.lifecycle == Terminated) && !m.wasTerminated:
		return "TERMINATING/TERMINATED implies was_terminated"
	case (m.lifecycle == Running || m.lifecycle == Suspending || m.lifecycle == Suspended) && !m.tokenInstalled:
		return "a VM past PENDING and not terminated has its token installed"
	}
	return ""
}
