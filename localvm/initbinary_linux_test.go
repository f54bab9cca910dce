//go:build linux

package localvm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/microvms/microvms/internal/testvm"
	"github.com/microvms/microvms/localvm/guestinit"
)

// initExe is what the guest's PID 1 was executed from, as the host sees it.
func initExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(testvm.GuestInitOf(t, GuestInitArg0)) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// foreignDaemon is a copy of agentdBin whose guest ABI reads differently:
// an agentd built from other sources, as far as the launcher can tell.
func foreignDaemon(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte(guestinit.ABI)
	if bytes.Count(b, marker) == 0 {
		t.Fatalf("%s does not hold this build's guest ABI", agentdBin)
	}
	other := bytes.Clone(marker)
	other[len("microvms-guest-abi:")] ^= 1 // '0'..'f' stays a hex digit or becomes another byte: either way not ours
	path := filepath.Join(t.TempDir(), "agentd-foreign")
	if err := os.WriteFile(path, bytes.ReplaceAll(b, marker, other), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// Catches: the launcher running every guest's init from the emulator's own
// binary (twenty-odd milliseconds of package initialisers, twice per guest:
// issue 52's guest start), and the opposite wrong edits: running any daemon
// binary as the init (a reference agentd, or one of other sources, would
// then be PID 1 of a guest whose root nobody built), or the agentd an
// image's artifact carries (code from the image, which sees the host's tree
// as the init, before the filter). The launcher's own agentd of this build
// is the init; an image's is not; a foreign one is not, and its guest still
// starts.
func TestGuestInitRunsFromTheLaunchersAgentdOnlyWhenOfThisBuild(t *testing.T) {
	t.Run("this build", func(t *testing.T) {
		_, sess := directGuest(t, GuestSpec{})
		if got := initExe(t); !strings.Contains(got, "memfd:"+filepath.Base(agentdBin)) {
			t.Errorf("a guest of this build's agentd ran its init from %q, want the daemon's sealed copy", got)
		}
		testvm.MustSh(t, sess, "true")
	})
	t.Run("an image's own", func(t *testing.T) {
		// A daemon the image's artifact carries (spec.Daemon) holds the ABI
		// here, being a copy of this build's: it still runs only as the
		// daemon, and the init comes from the launcher's own agentd.
		b, err := os.ReadFile(agentdBin)
		if err != nil {
			t.Fatal(err)
		}
		theirs := filepath.Join(t.TempDir(), "agentd-of-the-image")
		if err := os.WriteFile(theirs, b, 0o755); err != nil {
			t.Fatal(err)
		}
		_, sess := directGuest(t, GuestSpec{Daemon: theirs})
		if got := initExe(t); !strings.Contains(got, "memfd:"+filepath.Base(agentdBin)) {
			t.Errorf("a guest of an image's own agentd ran its init from %q, want the launcher's agentd %s", got, filepath.Base(agentdBin))
		}
		testvm.MustSh(t, sess, "true")
		daemon := false
		for _, pid := range procsInPidnsOf(t, testvm.GuestInitOf(t, GuestInitArg0)) {
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); strings.Contains(exe, "memfd:agentd-of-the-image") {
				daemon = true
			}
		}
		if !daemon {
			t.Error("no process of the guest runs the image's agentd: the test did not launch what it meant to")
		}
	})
	t.Run("foreign", func(t *testing.T) {
		saved := agentdBin
		agentdBin = foreignDaemon(t)
		t.Cleanup(func() { agentdBin = saved })
		_, sess := directGuest(t, GuestSpec{})
		if got := initExe(t); !strings.Contains(got, "memfd:microvms-guest-init") {
			t.Errorf("a guest of a foreign agentd ran its init from %q, want the emulator's own sealed copy", got)
		}
		if got := testvm.MustSh(t, sess, "echo started"); got != "started" {
			t.Errorf("a guest of a foreign agentd answered %q", got)
		}
	})
}

// Catches: an init that does not check the ABI it was launched with (the
// scan alone would then be all that keeps a daemon of other sources from
// setting up a guest). Run on the host, the foreign copy must refuse before
// anything else: its Main is the first thing agentd's main calls.
func TestGuestInitRefusesAnotherABI(t *testing.T) {
	cmd := exec.Command(foreignDaemon(t))
	cmd.Args = []string{GuestInitArg0}
	cmd.Env = []string{guestinit.ABIEnv + "=" + guestinit.ABI, "AGENTD_REPAIR_IDENTITY=0"}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "guest ABI") {
		t.Fatalf("a foreign init given this build's ABI: %v, %q; want a refusal naming the ABI", err, out)
	}
}

// Catches: the init starting its second stage before the launcher has
// placed it in the guest's cgroups (it is placed while it builds the root,
// and a process is moved with its threads, not its children), or the
// launcher sending the go-ahead before it placed it: the daemon and all it
// starts would then run outside the guest's limits.
func TestTheDaemonRunsInsideTheGuestsCgroups(t *testing.T) {
	g, _ := directGuest(t, GuestSpec{})
	if len(g.Limits.Applied) == 0 {
		t.Skipf("no limits on this host: %v", g.Limits.Missing)
	}
	init := testvm.GuestInitOf(t, GuestInitArg0)
	checked := 0
	for _, pid := range procsInPidnsOf(t, init) {
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil {
			continue // gone since the scan
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			for _, ctrl := range []string{"memory", "pids", "cpu"} {
				if !slicesContainPrefix(g.Limits.Applied, ctrl) || !slices.Contains(strings.Split(f[1], ","), ctrl) {
					continue
				}
				checked++
				if !strings.Contains(f[2], cgroupPrefix) {
					t.Errorf("pid %d of the guest is in %s group %q, outside the guest's", pid, ctrl, f[2])
				}
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no guest process's cgroups were checked (limits %v)", g.Limits.Applied)
	}
}
