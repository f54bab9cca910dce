package agentd

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Catches: identity repair run only at startup (NewServer's RepairIdentity),
// which on the platform happens before the image snapshot so every restored
// VM shares its machine-id and hostname; repairing in a background goroutine
// after the run hook's 200 (go func() in repairIdentityAtBootstrap), so the
// first exec and health can still see the snapshot's identity; repairing again
// on a replayed run hook; and health reporting the startup result after the
// bootstrap repair.
func TestFirstRunHookRepairsIdentityAgain(t *testing.T) {
	var mu sync.Mutex
	var hostnames []string
	var hostErr error
	idcfg, _ := identityLayout(t, &fakeHost{})
	idcfg.SetHostname = func(n string) error {
		mu.Lock()
		defer mu.Unlock()
		if hostErr != nil {
			return hostErr
		}
		hostnames = append(hostnames, n)
		return nil
	}
	d := startDaemon(t, func(c *Config) { c.Identity = idcfg })
	atStartup, _ := os.ReadFile(idcfg.MachineIDPath)
	health := func() (repaired, degraded bool) {
		t.Helper()
		resp, err := d.client.HealthWithResponse(context.Background())
		if err != nil || resp.StatusCode() != http.StatusOK {
			t.Fatalf("health: %v", err)
		}
		return resp.JSON200.IdentityRepaired, resp.JSON200.IdentityDegraded
	}
	if r, g := health(); !r || g {
		t.Fatalf("after startup: repaired %v degraded %v", r, g)
	}
	// The restored VM lacks the capability the snapshot's build had: the
	// bootstrap run degrades, and health must say so.
	mu.Lock()
	hostErr = unix.EPERM
	mu.Unlock()
	d.bootstrap(nil)
	// No waiting: the repair is done before the hook's 200.
	again, _ := os.ReadFile(idcfg.MachineIDPath)
	if !hex32.Match(again) || string(again) == string(atStartup) {
		t.Fatalf("machine-id after bootstrap %q, at startup %q: not repaired again", again, atStartup)
	}
	if r, g := health(); !r || !g {
		t.Fatalf("after a degraded bootstrap repair: repaired %v degraded %v", r, g)
	}
	d.bootstrap(nil) // identical replay: no third repair
	if now, _ := os.ReadFile(idcfg.MachineIDPath); string(now) != string(again) {
		t.Fatal("a replayed run hook repaired identity again")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hostnames) != 1 || !strings.HasPrefix(hostnames[0], "microvm-"+string(atStartup[:12])) {
		t.Fatalf("hostnames %v", hostnames)
	}
}

// Catches: identity repair disabled at startup but run anyway at bootstrap.
func TestRunHookSkipsRepairWhenDisabled(t *testing.T) {
	idcfg, _ := identityLayout(t, &fakeHost{})
	idcfg.Enabled = false
	d := startDaemon(t, func(c *Config) { c.Identity = idcfg })
	d.bootstrap(nil)
	select {
	case <-d.srv.bootRepairDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the bootstrap repair never finished")
	}
	if mid, _ := os.ReadFile(idcfg.MachineIDPath); !strings.HasPrefix(string(mid), "aaaa") {
		t.Fatalf("disabled repair rewrote machine-id: %q", mid)
	}
}

// Catches: the boot_id bind-mounted being the machine-id reformatted
// (bindBootID(cfg, id) with the machine-id's id), which hands anyone who can
// read /proc/sys/kernel/random/boot_id the persistent machine-id.
func TestBootIDIsNotTheMachineID(t *testing.T) {
	cfg, _ := identityLayout(t, &fakeHost{})
	if rep := RepairIdentity(cfg, quietLog); rep.Degraded {
		t.Fatalf("%+v", rep)
	}
	mid, _ := os.ReadFile(cfg.MachineIDPath)
	boot, _ := os.ReadFile(cfg.BootIDSourcePath)
	if got := strings.ReplaceAll(strings.TrimSpace(string(boot)), "-", ""); got == strings.TrimSpace(string(mid)) {
		t.Fatalf("boot_id %q is the machine-id %q", boot, mid)
	}
}
