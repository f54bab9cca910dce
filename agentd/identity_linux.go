package agentd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/taxonomy"
)

// IdentityConfig says where the guest's identity lives and how to change it.
// VMs restored from one snapshot share the image's machine-id, hostname,
// boot_id and random seed; repair gives each one its own. Every path and
// privileged call is injectable so tests run unprivileged.
type IdentityConfig struct {
	// Enabled switches repair on. The zero value is off, so no caller that
	// forgets this field repairs the identity of the machine it runs on;
	// with it off health reports identity_repaired false.
	Enabled bool
	// Why is the reason Enabled has its value, for the one startup line.
	Why string
	// MachineIDPath is rewritten with a fresh 128-bit id.
	MachineIDPath string
	// BootIDPath is the kernel's boot_id; a fresh one is bind-mounted over
	// it. Absent (not Linux procfs) means the step does not apply.
	BootIDPath string
	// BootIDSourcePath holds the fresh boot_id that is bind-mounted.
	BootIDSourcePath string
	// StalePaths are removed if present: systemd's random seed and dbus's
	// cached machine-id would otherwise carry the image's identity forward.
	StalePaths []string
	// Hostname overrides the generated microvm-<12 hex> name.
	Hostname    string
	SetHostname func(string) error
	BindMount   func(src, dst string) error
	// FreshID returns 32 lowercase hex characters.
	FreshID func() (string, error)
}

// IdentityReport is what health reports. Repaired is false only when repair
// was switched off; Degraded is true when any step failed.
type IdentityReport struct{ Repaired, Degraded bool }

// DefaultIdentityConfig targets the real guest paths and syscalls, with
// repair off until the configuration turns it on.
func DefaultIdentityConfig() IdentityConfig {
	return IdentityConfig{
		MachineIDPath:    "/etc/machine-id",
		BootIDPath:       "/proc/sys/kernel/random/boot_id",
		BootIDSourcePath: "/run/agentd-boot-id",
		StalePaths:       []string{"/var/lib/systemd/random-seed", "/var/lib/dbus/machine-id"},
		SetHostname:      func(name string) error { return unix.Sethostname([]byte(name)) },
		BindMount: func(src, dst string) error {
			return unix.Mount(src, dst, "", unix.MS_BIND, "")
		},
		FreshID: randomID,
	}
}

// under resolves every identity file below root instead of /
// (AGENTD_IDENTITY_ROOT), so a test can run the real binary against a
// temporary tree. The hostname and the mount are still real calls: a test
// that turns repair on runs the daemon in its own UTS and mount namespaces.
func (c IdentityConfig) under(root string) IdentityConfig {
	at := func(p string) string {
		if p == "" {
			return ""
		}
		return filepath.Join(root, p)
	}
	c.MachineIDPath = at(c.MachineIDPath)
	c.BootIDPath = at(c.BootIDPath)
	c.BootIDSourcePath = at(c.BootIDSourcePath)
	stale := make([]string, len(c.StalePaths))
	for i, p := range c.StalePaths {
		stale[i] = at(p)
	}
	c.StalePaths = stale
	return c
}

func randomID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// RepairIdentity runs every step even when an earlier one fails, logs each
// failure, and never returns an error: a daemon that refused to start over
// a shared hostname would be a dead VM, which is worse than a degraded one.
func RepairIdentity(cfg IdentityConfig, log *slog.Logger) IdentityReport {
	if log == nil {
		log = slog.Default()
	}
	if !cfg.Enabled {
		return IdentityReport{}
	}
	def := DefaultIdentityConfig()
	if cfg.SetHostname == nil {
		cfg.SetHostname = def.SetHostname
	}
	if cfg.BindMount == nil {
		cfg.BindMount = def.BindMount
	}
	if cfg.FreshID == nil {
		cfg.FreshID = def.FreshID
	}
	rep := IdentityReport{Repaired: true}
	step := func(name string, err error) {
		if err == nil {
			log.Debug("identity repaired", "step", name)
			return
		}
		rep.Degraded = true
		args := []any{"step", name, "err", err}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			// The usual cause: the VM was launched without the
			// additionalOsCapabilities that sethostname and mount need.
			args = append(args, "finding", taxonomy.FindingIdentityNeedsCapabilities)
		}
		log.Warn("identity repair step failed; serving with the image's shared value", args...)
	}

	id, err := cfg.FreshID()
	if err == nil && len(id) != 32 {
		err = fmt.Errorf("fresh id %q is not 32 hex characters", id)
	}
	if err != nil {
		for _, name := range []string{"machine-id", "hostname", "boot-id"} {
			step(name, err)
		}
	} else {
		if cfg.MachineIDPath != "" {
			step("machine-id", writeMachineID(cfg.MachineIDPath, id))
		}
		host := cfg.Hostname
		if host == "" {
			host = "microvm-" + id[:12]
		}
		step("hostname", cfg.SetHostname(host))
		if cfg.BootIDPath != "" {
			if _, serr := os.Stat(cfg.BootIDPath); serr == nil {
				// Its own id: boot_id and machine-id are different facts, and
				// one derived from the other tells anyone who sees one the other.
				bootID, err := cfg.FreshID()
				if err == nil && len(bootID) != 32 {
					err = fmt.Errorf("fresh id %q is not 32 hex characters", bootID)
				}
				if err == nil {
					err = bindBootID(cfg, bootID)
				}
				step("boot-id", err)
			}
		}
	}
	for _, p := range cfg.StalePaths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			step("stale "+p, err)
		}
	}
	return rep
}

// writeMachineID replaces the file rather than writing through it, so a
// read-only 0444 machine-id from the image is not an obstacle to root and a
// symlink at that path is replaced rather than followed.
func writeMachineID(path, id string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".agentd-new"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o444); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func bindBootID(cfg IdentityConfig, id string) error {
	src := cfg.BootIDSourcePath
	if src == "" {
		return errors.New("no source path for the fresh boot_id")
	}
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return err
	}
	dashed := fmt.Sprintf("%s-%s-%s-%s-%s", id[0:8], id[8:12], id[12:16], id[16:20], id[20:32])
	// Rewritten in place, never removed: after the first repair the boot_id
	// path is a bind mount of this very file, and a mount whose source was
	// unlinked cannot be mounted over (ENOENT), so the second repair (at
	// bootstrap) would fail. A previous 0444 copy is made writable first.
	if err := os.Chmod(src, 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(src, []byte(dashed+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(src, 0o444); err != nil {
		return err
	}
	return cfg.BindMount(src, cfg.BootIDPath)
}
