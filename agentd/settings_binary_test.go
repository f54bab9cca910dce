package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// identityTree is a stand-in guest root for AGENTD_IDENTITY_ROOT: the image's
// shared machine-id, boot_id and systemd seed.
func identityTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for path, body := range map[string]string{
		"etc/machine-id":                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		"proc/sys/kernel/random/boot_id":  "shared-boot-id\n",
		"var/lib/systemd/random-seed":     "seed",
		"var/lib/dbus/machine-id.keep-me": "unrelated",
	} {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const sharedMachineID = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"

func machineID(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc/machine-id"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostUnchanged fails the test if this machine's hostname changed while it
// ran: the namespaces are what keep repair off the host, and a mistake there
// must not pass quietly.
func hostUnchanged(t *testing.T) {
	t.Helper()
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if after, _ := os.Hostname(); after != before {
			t.Errorf("this machine's hostname changed from %q to %q", before, after)
		}
	})
}

// Catches: --help or --version starting the daemon (the defect that rewrote a
// developer's /etc/machine-id), reading the identity settings before the
// arguments, an unknown argument ignored rather than refused with exit 2,
// and usage written to the wrong stream. Run with repair switched on, in
// private namespaces, against a temporary identity tree: if the arguments
// were ignored, the tree would be repaired.
func TestBinaryArgumentsPrintAndTouchNothing(t *testing.T) {
	hostUnchanged(t)
	bin := agentdBinary(t)
	for _, tc := range []struct {
		args       []string
		code       int
		stdout     string // a substring stdout must hold; empty means stdout must be empty
		stderrWant string // likewise for stderr
	}{
		{args: []string{"--help"}, stdout: protocol.EnvRepairIdentity},
		{args: []string{"-h"}, stdout: "AGENTD_STREAM_BUFFER_BYTES"},
		{args: []string{"--version"}, stdout: "agentd " + binaryVersion + " (protocol v" + protocol.ProtocolVersion + ")"},
		{args: []string{"--bogus"}, code: 2, stderrWant: "unexpected argument \"--bogus\""},
		{args: []string{"--help", "extra"}, code: 2, stderrWant: "AGENTD_LISTEN"},
		{args: []string{"serve"}, code: 2, stderrWant: "Usage:"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			root := identityTree(t)
			port := freePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"),
				"AGENTD_REPAIR_IDENTITY=1",
				"AGENTD_IDENTITY_ROOT=" + root,
				"AGENTD_LISTEN=127.0.0.1:" + strconv.Itoa(port),
			}
			cmd.SysProcAttr = privateNamespaces()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("agentd %v did not exit: it is serving", tc.args)
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Skipf("cannot run agentd in private namespaces: %v", err)
			}
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout.String(), stderr.String())
			}
			check := func(name, got, want string) {
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Errorf("%s = %q, want it to hold %q", name, got, want)
				}
			}
			check("stdout", stdout.String(), tc.stdout)
			check("stderr", stderr.String(), tc.stderrWant)
			if got := machineID(t, root); got != sharedMachineID {
				t.Errorf("machine-id rewritten to %q", got)
			}
			if _, err := os.Stat(filepath.Join(root, "var/lib/systemd/random-seed")); err != nil {
				t.Errorf("random seed removed: %v", err)
			}
		})
	}
}

// Catches: repair on by default (unset must leave the machine alone), the
// reference's AGENTD_REPAIR_IDENTITY not read, or read in one direction
// only, or read with Go's strconv.ParseBool (which takes neither yes nor
// on); the older spelling dropped; a disagreement between the two names
// resolved as on; an unreadable value read as on; and the startup line that
// says whether repair ran and why missing or duplicated.
func TestBinaryIdentityRepairRunsOnlyWhenTheImageSaysGuest(t *testing.T) {
	hostUnchanged(t)
	for _, tc := range []struct {
		name string
		env  []string
		on   bool
		why  string
	}{
		{"unset", nil, false, "AGENTD_REPAIR_IDENTITY is unset"},
		{"1", []string{"AGENTD_REPAIR_IDENTITY=1"}, true, "AGENTD_REPAIR_IDENTITY=1 marks"},
		{"TRUE", []string{"AGENTD_REPAIR_IDENTITY= TRUE "}, true, "AGENTD_REPAIR_IDENTITY=TRUE"},
		{"yes", []string{"AGENTD_REPAIR_IDENTITY=yes"}, true, "yes"},
		{"On", []string{"AGENTD_REPAIR_IDENTITY=On"}, true, "On"},
		{"0", []string{"AGENTD_REPAIR_IDENTITY=0"}, false, "AGENTD_REPAIR_IDENTITY=0 switches it off"},
		{"false", []string{"AGENTD_REPAIR_IDENTITY=false"}, false, "false"},
		{"No", []string{"AGENTD_REPAIR_IDENTITY=No"}, false, "No"},
		{"off", []string{"AGENTD_REPAIR_IDENTITY=off"}, false, "off"},
		{"older spelling on", []string{"AGENTD_IDENTITY_REPAIR=1"}, true, "AGENTD_IDENTITY_REPAIR=1"},
		{"the two disagree", []string{"AGENTD_REPAIR_IDENTITY=1", "AGENTD_IDENTITY_REPAIR=0"}, false, "AGENTD_IDENTITY_REPAIR=0 switches it off"},
		{"unreadable", []string{"AGENTD_REPAIR_IDENTITY=maybe"}, false, "AGENTD_REPAIR_IDENTITY=maybe is not a boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := identityTree(t)
			port := freePort(t)
			p := launch(t, launchOpts{port: port, namespaced: true, env: append([]string{
				"AGENTD_PORT=" + strconv.Itoa(port),
				"AGENTD_LISTEN=127.0.0.1",
				"AGENTD_IDENTITY_ROOT=" + root,
			}, tc.env...)})
			h, err := p.client.HealthWithResponse(context.Background())
			if err != nil || h.JSON200 == nil {
				t.Fatalf("health: %v", err)
			}
			if h.JSON200.IdentityRepaired != tc.on {
				t.Fatalf("identity_repaired %v, want %v", h.JSON200.IdentityRepaired, tc.on)
			}
			mid := machineID(t, root)
			_, seedErr := os.Stat(filepath.Join(root, "var/lib/systemd/random-seed"))
			if tc.on {
				if !hex32.MatchString(mid) || mid == sharedMachineID || !os.IsNotExist(seedErr) || h.JSON200.IdentityDegraded {
					t.Fatalf("repair on but machine-id %q, seed %v, degraded %v", mid, seedErr, h.JSON200.IdentityDegraded)
				}
			} else if mid != sharedMachineID || seedErr != nil {
				t.Fatalf("repair off but machine-id %q, seed %v", mid, seedErr)
			}
			verdict := "identity repair skipped: "
			if tc.on {
				verdict = "identity repair ran: "
			}
			lines := p.logs.matching(`"msg":"identity repair `)
			if len(lines) != 1 || !strings.Contains(lines[0], verdict) || !strings.Contains(lines[0], tc.why) {
				t.Fatalf("startup lines about repair: %q; want one saying %q and %q", lines, verdict, tc.why)
			}
		})
	}
}

// Catches: a name the reference daemon reads (protocol.ReferenceEnv, from
// api/openapi.yaml) that this daemon ignores or reads under another
// spelling; a new reference name added to api/ with no check here; and
// AGENTD_LOG read with slog's own level names only, so an EnvFilter string
// such as agentd=debug,warn silently logs at info.
func TestBinaryHonoursEveryReferenceSetting(t *testing.T) {
	hostUnchanged(t)
	root := identityTree(t)
	port := freePort(t)
	limitByEnv := map[string]protocol.Limit{}
	for _, l := range protocol.Limits {
		limitByEnv[l.Env] = l
	}
	env := []string{"AGENTD_LISTEN=127.0.0.1", "AGENTD_IDENTITY_ROOT=" + root}
	checks := map[string]func(p *process, limits map[string]float64){}
	for _, name := range protocol.ReferenceEnv {
		if l, ok := limitByEnv[name]; ok {
			want := 7.0
			if name == "AGENTD_PORT" {
				want = float64(port)
			}
			env = append(env, name+"="+strconv.FormatFloat(want, 'f', -1, 64))
			checks[name] = func(_ *process, limits map[string]float64) {
				if got := limits[l.Name]; got != want {
					t.Errorf("%s=%v: /v1/schema limits.%s is %v", name, want, l.Name, got)
				}
			}
		}
	}
	env = append(env, "AGENTD_REPAIR_IDENTITY=yes", "AGENTD_LOG=agentd=debug,warn", "AGENTD_STREAM_CHANNEL_CAPACITY=64")
	checks["AGENTD_REPAIR_IDENTITY"] = func(p *process, _ map[string]float64) {
		if h, err := p.client.HealthWithResponse(context.Background()); err != nil || !h.JSON200.IdentityRepaired {
			t.Errorf("AGENTD_REPAIR_IDENTITY=yes: health %v %v", h, err)
		}
	}
	checks["AGENTD_LOG"] = func(p *process, _ map[string]float64) {
		if len(p.logs.matching(`"level":"DEBUG"`)) == 0 {
			t.Errorf("AGENTD_LOG=agentd=debug,warn: no debug line logged")
		}
	}
	checks["AGENTD_STREAM_CHANNEL_CAPACITY"] = func(p *process, _ map[string]float64) {
		if len(p.logs.matching(`"level":"WARN"`, "AGENTD_STREAM_CHANNEL_CAPACITY", "no effect")) != 1 {
			t.Errorf("AGENTD_STREAM_CHANNEL_CAPACITY=64: no one-line warning that it has no effect")
		}
	}
	p := launch(t, launchOpts{port: port, namespaced: true, env: env})
	sch, err := p.client.SchemaWithResponse(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Limits map[string]float64 `json:"limits"`
	}
	if err := json.Unmarshal(sch.Body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, name := range protocol.ReferenceEnv {
		check, ok := checks[name]
		if !ok {
			t.Errorf("%s is a reference setting with no check here", name)
			continue
		}
		check(p, doc.Limits)
	}
	if len(p.logs.matching("configuration value ignored")) != 1 {
		t.Errorf("warnings: %q; want exactly the channel-capacity one", p.logs.matching("configuration value ignored"))
	}
}

// Catches: AGENTD_LOG=warn (or off) still logging info lines, and an
// unreadable AGENTD_LOG stopping the daemon instead of logging at info.
func TestBinaryLogLevelFollowsAGENTD_LOG(t *testing.T) {
	quiet := startBinary(t, "AGENTD_LOG=warn")
	if lines := quiet.logs.matching(`"level":"INFO"`); len(lines) != 0 {
		t.Errorf("AGENTD_LOG=warn logged info lines: %q", lines)
	}
	odd := startBinary(t, "AGENTD_LOG=agentd=loud")
	if len(odd.logs.matching("agentd listening")) != 1 || len(odd.logs.matching("AGENTD_LOG", "logging at info")) != 1 {
		t.Errorf("an unreadable AGENTD_LOG: %q", odd.logs.matching(""))
	}
}

// dialRefused reports whether nothing answers on addr.
func dialRefused(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return false
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Skipf("%s is not usable here: %v", addr, err)
	}
	return true
}

// Catches: AGENTD_LISTEN ignored (agentd bound to every interface), a bare
// host not combined with AGENTD_PORT, a host:port whose port is not the one
// bound or published, the default narrowed from every interface (the
// platform's proxy needs it), and an unreadable AGENTD_LISTEN widening to
// every interface instead of loopback. 127.0.0.2 is loopback as well, but a
// socket bound to 127.0.0.1 alone does not answer it.
func TestBinaryListenAddress(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      func(port int) []string
		loopOnly bool
		warns    bool
	}{
		{"host:port", func(p int) []string { return []string{"AGENTD_LISTEN=127.0.0.1:" + strconv.Itoa(p)} }, true, false},
		{"host and AGENTD_PORT", func(p int) []string {
			return []string{"AGENTD_LISTEN=127.0.0.1", "AGENTD_PORT=" + strconv.Itoa(p)}
		}, true, false},
		{"default", func(p int) []string { return []string{"AGENTD_PORT=" + strconv.Itoa(p)} }, false, false},
		{"unreadable", func(p int) []string {
			return []string{"AGENTD_LISTEN=not a host!", "AGENTD_PORT=" + strconv.Itoa(p)}
		}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			p := launch(t, launchOpts{port: port, env: append([]string{"AGENTD_REPAIR_IDENTITY=0"}, tc.env(port)...)})
			other := net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
			if refused := dialRefused(t, other); refused != tc.loopOnly {
				t.Fatalf("127.0.0.2 refused %v, want %v", refused, tc.loopOnly)
			}
			if got := len(p.logs.matching("AGENTD_LISTEN", "127.0.0.1 rather than every interface")); (got == 1) != tc.warns {
				t.Fatalf("%d warnings about AGENTD_LISTEN", got)
			}
			sch, _ := p.client.SchemaWithResponse(context.Background())
			if !strings.Contains(string(sch.Body), `"port": `+strconv.Itoa(port)) {
				t.Fatalf("/v1/schema does not publish port %d", port)
			}
		})
	}
}

// Catches: daemon_version taken from anything but the running Version (the
// OpenAPI info.version "1" it once was), a stamped build whose /v1/schema
// still says the declared version, and docs/schema.json drifting from
// x-daemon-version.
func TestOneDaemonVersion(t *testing.T) {
	type view struct{ header, health, schema string }
	read := func(t *testing.T, c *protocol.ClientWithResponses) view {
		h, err := c.HealthWithResponse(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.SchemaWithResponse(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			DaemonVersion   string `json:"daemon_version"`
			ProtocolVersion string `json:"protocol_version"`
		}
		if err := json.Unmarshal(s.Body, &doc); err != nil || doc.ProtocolVersion != protocol.ProtocolVersion {
			t.Fatalf("schema: %v, protocol_version %q", err, doc.ProtocolVersion)
		}
		if s.HTTPResponse.Header.Get(protocol.VersionHeader) != h.HTTPResponse.Header.Get(protocol.VersionHeader) {
			t.Fatal("two responses carry different version headers")
		}
		return view{h.HTTPResponse.Header.Get(protocol.VersionHeader), h.JSON200.Version, doc.DaemonVersion}
	}
	t.Run("stamped binary", func(t *testing.T) {
		p := startBinary(t)
		if got := read(t, p.client); got != (view{binaryVersion, binaryVersion, binaryVersion}) {
			t.Fatalf("header, health, schema: %+v; want all %q", got, binaryVersion)
		}
	})
	t.Run("declared version", func(t *testing.T) {
		d := startDaemon(t, nil)
		want := protocol.DaemonVersion
		if got := read(t, d.client); got != (view{want, want, want}) {
			t.Fatalf("header, health, schema: %+v; want all %q", got, want)
		}
		var doc struct {
			DaemonVersion string `json:"daemon_version"`
		}
		raw, err := os.ReadFile("../docs/schema.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &doc); err != nil || doc.DaemonVersion != want {
			t.Fatalf("docs/schema.json daemon_version %q, want %q (%v)", doc.DaemonVersion, want, err)
		}
	})
}
