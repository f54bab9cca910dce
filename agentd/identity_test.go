package agentd

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

type fakeHost struct {
	hostnames []string
	mounts    [][2]string
	hostErr   error
	mountErr  error
}

func identityLayout(t *testing.T, h *fakeHost) (IdentityConfig, string) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"etc", "proc", "var/lib/systemd", "var/lib/dbus"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	shared := "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
	os.WriteFile(filepath.Join(dir, "etc/machine-id"), []byte(shared), 0o444)
	os.WriteFile(filepath.Join(dir, "proc/boot_id"), []byte("shared-boot-id\n"), 0o444)
	os.WriteFile(filepath.Join(dir, "var/lib/systemd/random-seed"), []byte("seed"), 0o600)
	return IdentityConfig{
		Enabled:          true,
		MachineIDPath:    filepath.Join(dir, "etc/machine-id"),
		BootIDPath:       filepath.Join(dir, "proc/boot_id"),
		BootIDSourcePath: filepath.Join(dir, "run/agentd-boot-id"),
		StalePaths:       []string{filepath.Join(dir, "var/lib/systemd/random-seed"), filepath.Join(dir, "var/lib/dbus/machine-id")},
		SetHostname: func(n string) error {
			if h.hostErr != nil {
				return h.hostErr
			}
			h.hostnames = append(h.hostnames, n)
			return nil
		},
		BindMount: func(src, dst string) error {
			if h.mountErr != nil {
				return h.mountErr
			}
			h.mounts = append(h.mounts, [2]string{src, dst})
			return nil
		},
	}, dir
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}\n$`)

// Every step runs and the identity is fresh. Catches: a deterministic or
// unchanged machine-id, a hostname not derived from the fresh id, a mount
// of the wrong file, or a stale random seed left behind.
func TestRepairIdentityRegeneratesEverything(t *testing.T) {
	h := &fakeHost{}
	cfg, dir := identityLayout(t, h)
	rep := RepairIdentity(cfg, quietLog)
	if rep != (IdentityReport{Repaired: true}) {
		t.Fatalf("%+v", rep)
	}
	mid, _ := os.ReadFile(cfg.MachineIDPath)
	if !hex32.Match(mid) || strings.HasPrefix(string(mid), "aaaa") {
		t.Fatalf("machine-id %q", mid)
	}
	if len(h.hostnames) != 1 || h.hostnames[0] != "microvm-"+string(mid[:12]) {
		t.Fatalf("hostnames %v", h.hostnames)
	}
	if len(h.mounts) != 1 || h.mounts[0] != [2]string{cfg.BootIDSourcePath, cfg.BootIDPath} {
		t.Fatalf("mounts %v", h.mounts)
	}
	boot, _ := os.ReadFile(cfg.BootIDSourcePath)
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`).Match(boot) {
		t.Fatalf("boot_id %q", boot)
	}
	if _, err := os.Stat(filepath.Join(dir, "var/lib/systemd/random-seed")); !os.IsNotExist(err) {
		t.Fatal("random seed survived")
	}
	// A second boot from the same snapshot gets a different identity.
	// The boot_id's source file, left 0444 by the first repair, is
	// rewritten and mounted again. Catches: bindBootID's chmod test with its
	// `err != nil` negated (a chmod that succeeds then returns before the
	// rewrite and the mount, so the second repair keeps the first boot_id
	// and reports no failure).
	if rep := RepairIdentity(cfg, quietLog); rep != (IdentityReport{Repaired: true}) {
		t.Fatalf("second repair: %+v", rep)
	}
	mid2, _ := os.ReadFile(cfg.MachineIDPath)
	if string(mid2) == string(mid) {
		t.Fatal("two repairs produced the same machine-id")
	}
	boot2, _ := os.ReadFile(cfg.BootIDSourcePath)
	if string(boot2) == string(boot) || len(h.mounts) != 2 {
		t.Fatalf("second repair: boot_id %q (first %q), mounts %v; want a new one, mounted again", boot2, boot, h.mounts)
	}
}

// EPERM on sethostname and mount (no additionalOsCapabilities) degrades,
// never stops, and the other steps still run. Catches: returning on the
// first failure, or reporting Repaired false for a degraded repair.
func TestRepairIdentityDegradesOnEPERM(t *testing.T) {
	h := &fakeHost{hostErr: unix.EPERM, mountErr: unix.EPERM}
	cfg, _ := identityLayout(t, h)
	rep := RepairIdentity(cfg, quietLog)
	if rep != (IdentityReport{Repaired: true, Degraded: true}) {
		t.Fatalf("%+v", rep)
	}
	mid, _ := os.ReadFile(cfg.MachineIDPath)
	if !hex32.Match(mid) || strings.HasPrefix(string(mid), "aaaa") {
		t.Fatal("machine-id not repaired after a later step failed")
	}
}

// Catches: repairing when switched off, or reporting it as repaired.
func TestRepairIdentityDisabledTouchesNothing(t *testing.T) {
	h := &fakeHost{}
	cfg, _ := identityLayout(t, h)
	cfg.Enabled = false
	if rep := RepairIdentity(cfg, quietLog); rep != (IdentityReport{}) {
		t.Fatalf("%+v", rep)
	}
	mid, _ := os.ReadFile(cfg.MachineIDPath)
	if !strings.HasPrefix(string(mid), "aaaa") || len(h.hostnames)+len(h.mounts) != 0 {
		t.Fatal("disabled repair changed something")
	}
}

// No boot_id file (not procfs) is not a failure; no entropy is. Catches:
// a missing boot_id marking the VM degraded, or an id failure ignored.
func TestRepairIdentityEdgeCases(t *testing.T) {
	h := &fakeHost{}
	cfg, _ := identityLayout(t, h)
	os.Remove(cfg.BootIDPath)
	if rep := RepairIdentity(cfg, quietLog); rep.Degraded || len(h.mounts) != 0 {
		t.Fatalf("absent boot_id: %+v %v", rep, h.mounts)
	}
	cfg.FreshID = func() (string, error) { return "", errors.New("no entropy") }
	if rep := RepairIdentity(cfg, quietLog); !rep.Degraded || !rep.Repaired {
		t.Fatalf("id failure: %+v", rep)
	}
}

// An id source that answers without an error but not with 32 characters is
// a failed step, like one that errs: nothing is written, named or mounted
// from it. For the boot_id's own id the same holds on its own. Catches:
// either `err == nil && len(id) != 32` check negated (`err != nil && …`),
// which takes a 40-character machine-id and hostname from a bad source, or
// hands a 31-character boot id to bindBootID (which panics slicing it).
func TestRepairIdentityRefusesAnIDOfTheWrongLength(t *testing.T) {
	h := &fakeHost{}
	cfg, dir := identityLayout(t, h)
	cfg.FreshID = func() (string, error) { return strings.Repeat("b", 40), nil }
	if rep := RepairIdentity(cfg, quietLog); !rep.Degraded || !rep.Repaired {
		t.Fatalf("a 40-character id: %+v, want repaired and degraded", rep)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "etc/machine-id")); string(b) != "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" {
		t.Fatalf("machine-id rewritten from a 40-character id: %q", b)
	}
	if len(h.hostnames) != 0 || len(h.mounts) != 0 {
		t.Fatalf("a 40-character id named the host %v and mounted %v", h.hostnames, h.mounts)
	}

	// A good machine id, then a boot id one character short.
	ids := []string{strings.Repeat("c", 32), strings.Repeat("d", 31)}
	cfg.FreshID = func() (string, error) { id := ids[0]; ids = ids[1:]; return id, nil }
	if rep := RepairIdentity(cfg, quietLog); !rep.Degraded {
		t.Fatalf("a 31-character boot id: %+v, want degraded", rep)
	}
	if len(h.mounts) != 0 {
		t.Fatalf("a 31-character boot id was mounted: %v", h.mounts)
	}
	if len(h.hostnames) != 1 || h.hostnames[0] != "microvm-cccccccccccc" {
		t.Fatalf("hostnames %v, want the good machine id's", h.hostnames)
	}
}

// A stale file that cannot be removed, or a machine-id that cannot be
// replaced, is a failed step: the repair reports itself degraded, and the
// machine-id's temporary file is cleaned up. A non-empty directory at the
// path makes each fail (remove: ENOTEMPTY; rename over it: EISDIR).
// Catches: the stale removal's `err != nil` negated (a failed removal then
// passes as done), and writeMachineID's rename test negated (a failed
// rename reports success and leaves machine-id.agentd-new behind).
func TestRepairIdentityReportsWhatItCouldNotReplace(t *testing.T) {
	h := &fakeHost{}
	cfg, _ := identityLayout(t, h)
	stale := cfg.StalePaths[0]
	os.Remove(stale)
	if err := os.MkdirAll(filepath.Join(stale, "kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	if rep := RepairIdentity(cfg, quietLog); !rep.Degraded {
		t.Fatalf("a stale path that could not be removed: %+v, want degraded", rep)
	}

	h = &fakeHost{}
	cfg, _ = identityLayout(t, h)
	os.Remove(cfg.MachineIDPath)
	if err := os.MkdirAll(filepath.Join(cfg.MachineIDPath, "kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	if rep := RepairIdentity(cfg, quietLog); !rep.Degraded {
		t.Fatalf("a machine-id that could not be replaced: %+v, want degraded", rep)
	}
	if _, err := os.Lstat(cfg.MachineIDPath + ".agentd-new"); !os.IsNotExist(err) {
		t.Fatalf("the failed replacement left its temporary file: %v", err)
	}
}
