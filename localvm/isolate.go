package localvm

import "github.com/microvms/microvms/gen/taxonomy"

// IsolationError is the refusal of a host that cannot confine a guest the
// way AgentdLauncher does. It is a missing prerequisite, never a reason to
// run the guest unconfined.
type IsolationError struct {
	// Missing names what the host lacks, in words a user can act on.
	Missing string
	Err     error
}

func (e *IsolationError) Error() string {
	msg := "emulator: cannot isolate a MicroVM on this host; missing: " + e.Missing
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

func (e *IsolationError) Unwrap() error { return e.Err }

// Kind is the error kind a caller reports it as: a missing prerequisite
// (ERR_PRECONDITION, exit 12).
func (e *IsolationError) Kind() taxonomy.ErrorKind { return taxonomy.KindPrecondition }

// LimitsReport says which of a local guest's limits hold.
type LimitsReport struct {
	// Applied lists each limit in force, e.g. "memory.max 8192 MiB".
	Applied []string
	// Missing lists each limit that could not be set, with the reason.
	Missing []string
}
