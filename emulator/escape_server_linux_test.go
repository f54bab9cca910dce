//go:build linux

package emulator

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/internal/testvm"
)

// The escape and rootless tests that need the control plane: the guest's
// end seen as the MicroVM's state, the launch warning. The attacks on the
// runtime itself are localvm's (escape_linux_test.go there); the helpers
// both share are internal/testvm's.

// Catches (issue 44, attack 5's way in): a guest whose daemon was killed
// while its init was stopped, left RUNNING with its port taken by whatever
// the guest listens with there. A killed daemon ends the MicroVM, the
// control plane says why, and nothing of the guest's is proxied to.
func TestEscapeKilledDaemonEndsTheMicrovm(t *testing.T) {
	testvm.InBothModes(t, "TestEscapeKilledDaemonEndsTheMicrovm", func(t *testing.T) {
		s, base := isolated(t)
		vm := launchGuest(t, s, base, false)
		sess := session(t, base, vm)
		testvm.WithProbe(t, sess)
		testvm.StartQuietly(t, sess, "setsid /tmp/escapeprobe takeover 1 $("+testvm.AgentdPidScript+") 9000 </dev/null >/dev/null 2>&1 & sleep 1")
		var g cp.GetMicrovmResponse
		for i := 0; i < 1000; i++ { // bounded: about ten seconds
			if g = get(t, base, vm.MicrovmId); g.State == cp.MicrovmStateTERMINATED {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if g.State != cp.MicrovmStateTERMINATED || deref(g.StateReason) != guestExitedReason {
			t.Errorf("after its daemon was killed the MicroVM is %s (%s), want TERMINATED (%s)", g.State, deref(g.StateReason), guestExitedReason)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if r, err := sess.Run(ctx, []string{"echo", "reached"}, client.RunOptions{}); err == nil {
			t.Errorf("a request reached the ended guest's port: %+v", r)
		} else if strings.Contains(err.Error(), "impostor") {
			t.Errorf("the guest's impostor on the daemon's port answered: %v", err)
		}
	})
}

// Catches: local mode that still needs root (the old refusal of an
// unprivileged host), and a rootless guest whose root is not confined to
// the caller's own uid. The test binary re-runs itself as nobody, with a
// fresh HOME and TMPDIR, to be that host.
func TestUnprivilegedHostRunsConfinedGuests(t *testing.T) {
	if os.Getenv("EMULATOR_UNPRIVILEGED_CHILD") == "1" {
		unprivilegedChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become an unprivileged user")
	}
	testvm.RerunAsNobody(t, "TestUnprivilegedHostRunsConfinedGuests", "rootless-checked", "EMULATOR_UNPRIVILEGED_CHILD=1")
}

func unprivilegedChild(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Fatalf("CheckIsolation as an unprivileged user: %v, want nil (user namespaces are enabled here)", err)
	}
	s, base := isolated(t)
	vm := launchGuest(t, s, base, false)
	sess := session(t, base, vm)
	if got := testvm.MustSh(t, sess, "id -u"); got != "0" {
		t.Errorf("the guest's uid is %s, want 0 (root of its own namespace)", got)
	}
	_, pid := startSleeper(t, sess, "rootless-")
	if uid := hostUIDOf(t, pid); uid != os.Getuid() {
		t.Errorf("the guest's process runs as host uid %d, want the caller's %d", uid, os.Getuid())
	}
	terminate(t, base, vm.MicrovmId)
	fmt.Println("rootless-checked")
}

// Catches (issue 44): a rootless emulator on a host that does not let it
// limit a guest (cgroup v1, or v2 without delegation) saying so only on
// `run --local`: `run --keep` against `microvm emulator`, the engine and
// MCP said nothing. The emulator itself now warns, once per such MicroVM,
// naming each missing limit; a guest with every limit gets no warning.
func TestAGuestWithoutLimitsIsWarnedOf(t *testing.T) {
	testvm.InBothModes(t, "TestAGuestWithoutLimitsIsWarnedOf", func(t *testing.T) {
		var mu sync.Mutex
		var warned []string
		s, base := serve(t, Options{VMs: AgentdLauncher(agentdBin, nil), Warn: func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			warned = append(warned, msg)
		}})
		vm := launchGuest(t, s, base, false)
		l, ok := s.GuestLimits(vm.MicrovmId)
		if !ok {
			t.Fatal("no limits report for a running guest")
		}
		if os.Geteuid() != 0 && !testvm.CgroupV2Only() && len(l.Missing) == 0 {
			t.Errorf("a rootless guest on a cgroup v1 host reports every limit applied: %+v", l)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(l.Missing) == 0 {
			if len(warned) != 0 {
				t.Errorf("a guest with every limit was warned of: %q", warned)
			}
			return
		}
		if len(warned) != 1 || !strings.Contains(warned[0], vm.MicrovmId) {
			t.Fatalf("warnings %q, want one naming %s", warned, vm.MicrovmId)
		}
		for _, m := range l.Missing {
			if !strings.Contains(warned[0], m) {
				t.Errorf("the warning %q does not name the missing %q", warned[0], m)
			}
		}
	})
}
