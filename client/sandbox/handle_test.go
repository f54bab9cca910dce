package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A MicroVM by its id alone, against the real embedded emulator and an
// agentd guest: the lifecycle a process that did not launch it drives.
//
// Catches: a suspend sent to a SUSPENDED MicroVM (the model refuses it
// unsent), a resume of a RUNNING one that is not a no-op, a terminated one
// resumed as anything but WindowClosed, a wrong id classed transient
// (Retryable) instead of Precondition, Unavailable silent about a suspended
// MicroVM, and List leaving a live MicroVM out.
func TestHandleByID(t *testing.T) {
	ctx := context.Background()
	emu, sb := localSandbox(t)
	cp, err := emu.Control(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := emu.Wait(30 * time.Second)
	h := sandbox.Open(cp, sb.ID())

	st, err := h.Status(ctx)
	if err != nil || st.State != sandbox.Running || st.Endpoint == "" || st.Unavailable() != nil {
		t.Fatalf("%+v %v", st, err)
	}
	if st, err := h.Resume(ctx, w); err != nil || st.State != sandbox.Running {
		t.Fatalf("resume of a RUNNING MicroVM: %+v %v", st, err)
	}
	if st, err := h.Suspend(ctx, w); err != nil || st.State != sandbox.Suspended {
		t.Fatalf("suspend: %+v %v", st, err)
	}
	st, err = h.Suspend(ctx, w)
	if client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), sb.ID()) || st.State != sandbox.Suspended {
		t.Fatalf("a second suspend: %+v %v", st, err)
	}
	if cause := st.Unavailable(); client.KindOf(cause) != taxonomy.KindPrecondition || !strings.Contains(cause.Error(), "SUSPENDED") {
		t.Fatalf("Unavailable of a suspended MicroVM: %v", cause)
	}
	listed, err := sandbox.List(ctx, cp)
	if err != nil || len(listed) != 1 || listed[0].ID != sb.ID() || listed[0].State != sandbox.Suspended {
		t.Fatalf("List: %+v %v", listed, err)
	}
	if st, err := h.Resume(ctx, w); err != nil || st.State != sandbox.Running {
		t.Fatalf("resume: %+v %v", st, err)
	}
	if _, err := h.Terminate(ctx); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	if st, err := h.Await(ctx, sandbox.Terminated, w); err != nil || st.State != sandbox.Terminated {
		t.Fatalf("awaiting TERMINATED: %+v %v", st, err)
	}
	if _, err := h.Terminate(ctx); err != nil {
		t.Fatalf("a second terminate: %v", err)
	}
	if _, err := h.Resume(ctx, w); client.KindOf(err) != taxonomy.KindWindowClosed {
		t.Fatalf("resume of a terminated MicroVM: %v", err)
	}
	_, err = sandbox.Open(cp, "microvm-nosuchvm").Status(ctx)
	if client.KindOf(err) != taxonomy.KindPrecondition {
		t.Fatalf("an unknown id: %v", err)
	}
}
