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

// Where a guest's init ran from, as /proc/PID/exe names the sealed copy.
const (
	fromGuestInit = "memfd:" + guestinit.BinaryName // cmd/microvm-guest-init
	fromEmulator  = "memfd:microvms-emulator"       // the emulator's own binary (here, this test binary)
)

// thisBuildsInit is the microvm-guest-init testbin built beside agentdBin.
func thisBuildsInit(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(agentdBin), guestinit.BinaryName))
	if err != nil {
		t.Fatalf("no guest init beside the test's agentd: %v", err)
	}
	if !bytes.Contains(b, []byte(guestinit.ABI)) {
		t.Fatalf("the guest init beside the test's agentd does not hold this build's ABI")
	}
	return b
}

// foreignInit is this build's init with its ABI reading differently: an
// init built from other sources, as far as the launcher can tell.
func foreignInit(t *testing.T) []byte {
	t.Helper()
	marker := []byte(guestinit.ABI)
	other := bytes.Clone(marker)
	other[len("microvms-guest-abi:")] ^= 1 // '0'..'f' stays a hex digit or becomes another byte: either way not ours
	return bytes.ReplaceAll(thisBuildsInit(t), marker, other)
}

// installAt makes a directory holding a copy of this build's agentd and,
// unless init is nil, a guest init of those bytes beside it, and returns
// the agentd's path.
func installAt(t *testing.T, init []byte) string {
	t.Helper()
	dir := t.TempDir()
	testvm.CopyFile(t, agentdBin, filepath.Join(dir, "agentd"), 0o755)
	if init != nil {
		if err := os.WriteFile(filepath.Join(dir, guestinit.BinaryName), init, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "agentd")
}

// launcherAgentd points the launcher of directGuest at path for one test.
func launcherAgentd(t *testing.T, path string) {
	saved := agentdBin
	agentdBin = path
	t.Cleanup(func() { agentdBin = saved })
}

// Catches: the launcher running every guest's init from the emulator's own
// binary (twenty-odd milliseconds of package initialisers, twice per guest:
// issue 52's guest start), and the opposite wrong edits: running an init of
// other sources (it would be PID 1 of a guest whose root nobody built the
// way this emulator expects), taking the init from beside the agentd an
// image's artifact carries (code from the image, which sees the host's tree
// as the init, before the filter), failing a launch when no init is
// installed, or looking beside a symlink rather than the binary it names.
func TestGuestInitRunsFromBesideTheLaunchersAgentdOnlyWhenOfThisBuild(t *testing.T) {
	t.Run("this build", func(t *testing.T) {
		_, sess := directGuest(t, GuestSpec{})
		if got := initExe(t); !strings.Contains(got, fromGuestInit) {
			t.Errorf("a guest with this build's init beside its agentd ran its init from %q, want %s", got, fromGuestInit)
		}
		testvm.MustSh(t, sess, "true")
	})
	t.Run("beside an image's own agentd", func(t *testing.T) {
		// The image's daemon (spec.Daemon) has this build's init beside
		// it, the launcher's has none: the init is the emulator's, and the
		// image's daemon still runs as the daemon.
		theirs := installAt(t, thisBuildsInit(t))
		launcherAgentd(t, installAt(t, nil))
		_, sess := directGuest(t, GuestSpec{Daemon: theirs})
		if got := initExe(t); !strings.Contains(got, fromEmulator) {
			t.Errorf("a guest whose image's agentd has an init beside it ran its init from %q, want %s", got, fromEmulator)
		}
		testvm.MustSh(t, sess, "true")
		daemon := false
		for _, pid := range procsInPidnsOf(t, testvm.GuestInitOf(t, GuestInitArg0)) {
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); strings.Contains(exe, "memfd:agentd") {
				daemon = true
			}
		}
		if !daemon {
			t.Error("no process of the guest runs the image's agentd: the test did not launch what it meant to")
		}
	})
	for _, c := range []struct {
		name string
		init func(t *testing.T) []byte // beside the launcher's agentd; nil: none
	}{
		{"a foreign init", foreignInit},
		{"no init installed", func(*testing.T) []byte { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			launcherAgentd(t, installAt(t, c.init(t)))
			_, sess := directGuest(t, GuestSpec{})
			if got := initExe(t); !strings.Contains(got, fromEmulator) {
				t.Errorf("a guest with %s ran its init from %q, want %s", c.name, got, fromEmulator)
			}
			if got := testvm.MustSh(t, sess, "echo started"); got != "started" {
				t.Errorf("a guest with %s answered %q", c.name, got)
			}
		})
	}
	t.Run("through a symlink", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "agentd")
		if err := os.Symlink(agentdBin, link); err != nil {
			t.Fatal(err)
		}
		launcherAgentd(t, link)
		directGuest(t, GuestSpec{})
		if got := initExe(t); !strings.Contains(got, fromGuestInit) {
			t.Errorf("a guest of a symlinked agentd ran its init from %q, want the %s beside the binary it names", got, fromGuestInit)
		}
	})
}

// Catches: an init that does not check the ABI it was launched with (the
// scan alone would then be all that keeps an init of other sources from
// setting up a guest). Run on the host, the foreign copy must refuse before
// anything else; run by hand, the init only explains itself.
func TestGuestInitRefusesAnotherABI(t *testing.T) {
	path := filepath.Join(t.TempDir(), guestinit.BinaryName)
	if err := os.WriteFile(path, foreignInit(t), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path)
	cmd.Args = []string{GuestInitArg0}
	cmd.Env = []string{guestinit.ABIEnv + "=" + guestinit.ABI}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "guest ABI") {
		t.Fatalf("a foreign init given this build's ABI: %v, %q; want a refusal naming the ABI", err, out)
	}
	out, err = exec.Command(filepath.Join(filepath.Dir(agentdBin), guestinit.BinaryName)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "only the microvm emulator runs it") {
		t.Fatalf("the init run by hand: %v, %q; want it to explain itself and fail", err, out)
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

// Catches: the isolation probe still re-executing the emulator's own
// binary where this build's init is installed (a copy of the whole
// emulator and its package initialisers before every `microvm run
// --local`'s first launch), or probing from a foreign init; and a probe
// that fails from either binary, which would refuse a host that can
// confine guests.
func TestTheIsolationProbeRunsFromTheGuestInit(t *testing.T) {
	for _, c := range []struct {
		what, own, want string
	}{
		{"this build's init beside agentd", agentdBin, fromGuestInit},
		{"no init installed", installAt(t, nil), fromEmulator},
		{"a foreign init", installAt(t, foreignInit(t)), fromEmulator},
		{"no agentd named", "", fromEmulator},
	} {
		from, err := runProbe(c.own)
		if err != nil {
			t.Errorf("%s: the probe failed: %v", c.what, err)
		}
		if !strings.Contains(from, c.want) {
			t.Errorf("%s: the probe ran from %q, want %s", c.what, from, c.want)
		}
	}
}
