package sandbox

// What a sandbox's streams learn of its lifecycle: a stream whose reattach
// fails asks GetMicrovm whether the VM is suspended, so a command frozen by
// a suspend (the caller's, or the idle policy's) is followed again after
// the resume instead of given up on (client.WithVMPhase).

import (
	"context"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// vmPhase reads the MicroVM's state for the session's streams.
func (s *Sandbox) vmPhase(ctx context.Context) (client.VMPhase, error) {
	st, err := Open(s.api(), s.id).Status(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case st.Dead():
		reason := ""
		if st.StateReason != "" {
			reason = " (" + st.StateReason + ")"
		}
		return client.VMGone, client.Errorf(taxonomy.KindPlatform, taxonomy.FindingIdlePolicy,
			"MicroVM %s is %s%s, so its exec streams can never be reattached; the output not yet read is lost with it", s.id, st.State, reason)
	case st.State == Suspended || st.State == Suspending || st.State == Pending:
		return client.VMPaused, nil
	}
	return client.VMRunning, nil
}
