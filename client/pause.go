package client

// A stream across a suspend: a suspended MicroVM answers nothing (the
// emulator's endpoint answers 502; the platform's answer is unmeasured,
// finding idle-policy), so a stream that counted those refusals against its
// reattach budget gave up on a command that was merely frozen (finding
// suspend-is-freeze) and would have carried on after the resume. A session
// told how to read its VM's lifecycle waits the suspend out instead and
// reattaches at its cursor once the VM runs again.

import (
	"context"
	"time"
)

// VMPhase is where a session's MicroVM stands, as far as its streams care.
type VMPhase uint8

// The phases a VMPhaseFunc reports.
const (
	// VMRunning: the VM takes traffic; a failed reattach is a failure and
	// counts against the stream's budget.
	VMRunning VMPhase = iota + 1
	// VMPaused: SUSPENDING, SUSPENDED, or PENDING on its way back from a
	// resume. Its processes are frozen, not gone, so a stream waits.
	VMPaused
	// VMGone: TERMINATING or TERMINATED; nothing will ever answer again.
	VMGone
)

// VMPhaseFunc reads the phase of the session's MicroVM, normally through
// GetMicrovm. For VMGone it returns the error a stream fails with (naming
// the state and its reason); when the phase cannot be read it returns a
// zero phase and the error, and the stream falls back to its reattach budget.
type VMPhaseFunc func(ctx context.Context) (VMPhase, error)

// WithVMPhase tells the session how to read its MicroVM's lifecycle. An
// exec stream whose reattach fails then asks: while the VM is paused
// (suspended by the caller or by the idle policy) the stream sends nothing
// to its endpoint, which would auto-resume a VM its owner suspended on
// purpose, and polls phase instead, backing off to the poll interval
// (WithPollInterval), without spending its reattach budget and bounded only
// by its context; once the VM runs again (a ResumeMicrovm, or any inbound
// request that auto-resumed it) the stream reattaches at its cursor. A VM
// that is gone fails the stream with phase's error. Without it a stream
// gives up after its reattach budget, however briefly the VM was suspended.
func WithVMPhase(phase VMPhaseFunc) Option {
	return func(s *Session) error { s.phase = phase; return nil }
}

// pausedWait reports whether the stream's last failure met a paused VM,
// and then waits until the VM is no longer paused (or the stream's context
// ends); the caller reattaches without counting the failure. A VM that is
// gone is the returned error.
func (st *Stream) pausedWait() (bool, error) {
	read := st.e.s.phase
	if read == nil {
		return false, nil
	}
	for n := 1; ; n++ {
		ph, err := read(st.ctx)
		switch {
		case ph == VMGone && err != nil:
			return false, err
		case ph != VMPaused:
			return n > 1, nil
		}
		if sleepCtx(st.ctx, pauseBackoff(n, st.e.s.pollEvery)) != nil {
			return true, nil
		}
	}
}

// pauseBackoff is the wait before the n-th look at a paused VM: fast at
// first, since a resume may already be under way and the frozen command's
// output piles up once it thaws, then at most every ceiling.
func pauseBackoff(n int, ceiling time.Duration) time.Duration {
	d := 25 * time.Millisecond << min(n-1, 8)
	if ceiling > 0 && d > ceiling {
		d = ceiling
	}
	return d
}
