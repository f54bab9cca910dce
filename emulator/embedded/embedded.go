// Package embedded runs the local emulator of the Lambda MicroVMs control
// plane inside the calling process with one call, the way `microvm --local`
// does: loopback only, guests that are real agentd processes on this host,
// the wall clock moving the lifecycle (a launch is RUNNING as soon as its
// run hook answers), no AWS credentials needed, and control-plane clients
// that poll fast enough for a person to wait on. Each guest is confined in
// its own namespaces (emulator.AgentdLauncher); a host that cannot do that
// is refused with ERR_PRECONDITION naming what it lacks.
//
//	emu, err := embedded.Start(ctx, embedded.Options{})
//	defer emu.Close()
//	sb, err := emu.Launch(ctx, sandbox.Options{})
//	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
//	res, err := sb.Run(ctx, []string{"echo", "hi"}, client.RunOptions{})
//
// Launch registers an image and polls fast; Client is the control-plane
// client for anything else (images, listing, a sandbox.Launch of your own).
//
// It must never listen on anything but loopback, never call AWS, never read
// or need a real credential, and never leave a guest running after Close.
package embedded

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// AgentdEnv is the variable naming the host agentd when no path is given.
const AgentdEnv = "MICROVM_AGENTD"

// PollInterval is how often a waiter polls the emulator: its lifecycle moves
// with the wall clock, so a short interval is what makes a launch take
// milliseconds rather than the ten seconds a waiter spends between polls of
// the platform.
const PollInterval = 10 * time.Millisecond

// Grace is how long an emulated build may sit with every build PENDING
// before the waiter calls it wedged: emulated builds are scheduled at once.
const Grace = 2 * time.Second

// Options configure Start. The zero value finds agentd, listens on a free
// loopback port and keeps its state in a temporary directory.
type Options struct {
	// Agentd is the host agentd guests run when an image carries none of its
	// own; empty searches as FindAgentd does.
	Agentd string
	// Listen is the loopback address to serve on; empty is 127.0.0.1:0.
	Listen string
	// StateDir holds unpacked artifacts; empty is a temporary directory
	// removed by Close.
	StateDir string
	// Region is the region the emulator mints ARNs for and accepts
	// signatures of; zero is the first measured region.
	Region client.Region
	// GuestLog receives the guests' agentd log lines; nil discards them.
	GuestLog io.Writer
	// Getenv reads the environment for FindAgentd; nil is os.Getenv.
	Getenv func(string) string
	// Buckets are made in the emulator's S3 slice before it serves, for
	// builds that upload their artifact to S3.
	Buckets []string
	// Launcher starts the guests; nil is emulator.AgentdLauncher, which
	// confines each in its own namespaces and refuses a host that cannot.
	Launcher func(agentd string, guestLog io.Writer) emulator.Launcher
	// BaseImage is an OCI image layout directory or `docker save` tarball
	// every local Dockerfile build's FROM resolves to; empty pulls FROM
	// from its registry with the user's Docker credentials.
	BaseImage string
	// NoPull keeps a build without BaseImage from pulling its FROM: its
	// guests then run on the host's system directories.
	NoPull bool
	// BuildCache keeps base images and build-step snapshots; empty is
	// DefaultBuildCache's answer.
	BuildCache string
	// BuildProgress sees every step of every local Dockerfile build.
	BuildProgress func(image string, e emulator.BuildEvent)
	// Warn is told of every guest that runs without some of its limits
	// (emulator.Options.Warn); nil says nothing.
	Warn func(msg string)
	// Trace sees each phase of every launch (emulator.Options.Trace).
	Trace func(microvmID string, phase emulator.TracePhase)
	// Network is where guests under a network policy reach
	// (emulator.Options.Network); the zero value is what the environment
	// says (emulator.NetworkOptionsFromEnv: MICROVM_NETWORK_RESOLVE,
	// MICROVM_NETWORK_UPSTREAM_CA), else this host's own.
	Network emulator.NetworkOptions
}

// DefaultBuildCache is where local builds keep base images (by digest)
// and step snapshots across runs: $MICROVM_STATE_DIR/images, else
// $XDG_STATE_HOME/microvm/images, else ~/.microvm/images, beside the run
// ledger.
func DefaultBuildCache(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if d := getenv("MICROVM_STATE_DIR"); d != "" {
		return filepath.Join(d, "images")
	}
	if x := getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "microvm", "images")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".microvm", "images")
	}
	return ""
}

// Emulator is a running embedded emulator.
type Emulator struct {
	// Server is the emulator itself, for fault injection and inspection.
	Server *emulator.Server
	// URL is the base URL of every service it serves (the control plane,
	// and the S3, CloudWatch Logs and STS slices), http://127.0.0.1:PORT.
	URL string
	// Agentd is the host agentd guests run.
	Agentd string
	region client.Region
	stop   func()
	cp     controlOnce
}

// Start serves the emulator and returns once it accepts requests.
func Start(ctx context.Context, o Options) (*Emulator, error) {
	if err := ctx.Err(); err != nil {
		return nil, client.Errorf(taxonomy.KindInterrupted, "", "starting the emulator: %w", err)
	}
	bin, err := FindAgentd(o.Agentd, o.Getenv)
	if err != nil {
		return nil, err
	}
	if o.Region.IsZero() {
		o.Region = client.USEast1
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	launcher := o.Launcher
	if launcher == nil {
		// Refused before anything listens: a host that cannot confine a
		// guest never gets an unconfined one.
		if err := emulator.CheckIsolationFor(bin); err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "%v", err).WithCause(err)
		}
		launcher = emulator.AgentdLauncher
	}
	netOpts := o.Network
	if netOpts.Resolver == nil && netOpts.Dial == nil && netOpts.RootCAs == nil {
		getenv := o.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		if netOpts, err = emulator.NetworkOptionsFromEnv(getenv); err != nil {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "%v", err)
		}
	}
	srv := emulator.New(emulator.Options{
		Network:   netOpts,
		Region:    o.Region.String(),
		VMs:       launcher(bin, o.GuestLog),
		WallClock: true,
		StateDir:  o.StateDir,
		BaseImage: o.BaseImage, PullBase: !o.NoPull, BuildProgress: o.BuildProgress,
		BuildCache: cmp.Or(o.BuildCache, DefaultBuildCache(o.Getenv)),
		Warn:       o.Warn,
		Trace:      o.Trace,
	})
	for _, b := range o.Buckets {
		srv.CreateBucket(b)
	}
	u, stop, err := srv.ServeOn(o.Listen)
	if err != nil {
		srv.Close()
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "serving the emulator on %s: %w", o.Listen, err)
	}
	return &Emulator{Server: srv, URL: u, Agentd: bin, region: o.Region, stop: stop}, nil
}

// Region is the region the emulator serves.
func (e *Emulator) Region() client.Region { return e.region }

// Control is a control-plane client for this emulator: its URL, the
// emulator's placeholder credentials, retries without long backoffs.
func (e *Emulator) Control(ctx context.Context) (*lambdamicrovms.Client, error) {
	return cplane.New(ctx, cplane.Options{Region: e.region, Endpoint: e.URL, Credentials: Credentials(), MaxBackoff: 50 * time.Millisecond})
}

// Wait is the waiter options for the emulator: fast polls, a short wedge
// grace, and timeout as the bound when the context has none (zero is the
// waiter's default).
func (e *Emulator) Wait(timeout time.Duration) cplane.WaitOptions {
	return WaitOptions(timeout)
}

// WaitOptions is Emulator.Wait for an emulator this process did not start
// (one `microvm emulator` serves).
func WaitOptions(timeout time.Duration) cplane.WaitOptions {
	return cplane.WaitOptions{Interval: PollInterval, Grace: Grace, Timeout: timeout}
}

// Close stops the emulator and every guest it started.
func (e *Emulator) Close() {
	if e != nil && e.stop != nil {
		e.stop()
	}
}

// Credentials are what a client signs emulator requests with. The emulator
// checks a signature's scope (service and region), never its secret, so
// these name nothing real and no AWS account is needed.
func Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider("EMULATORACCESSKEY", "emulator-secret-access-key", "")
}

// IsLocal reports whether endpoint is a control-plane URL on this machine
// (a loopback host): an emulator, or a compatible endpoint that does not
// verify credentials either.
func IsLocal(endpoint string) bool {
	if endpoint == "" {
		return false
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// FindAgentd is the host agentd guests run: explicit when given, else
// $MICROVM_AGENTD, else an agentd next to this process's executable, else
// agentd on PATH. None found is a Precondition naming every place searched.
func FindAgentd(explicit string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var searched []string
	try := func(what, path string) (string, bool) {
		searched = append(searched, what+" ("+path+")")
		if st, err := os.Stat(path); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			abs, err := filepath.Abs(path)
			if err == nil {
				return abs, true
			}
		}
		return "", false
	}
	if explicit != "" {
		if p, ok := try("--agentd", explicit); ok {
			return p, nil
		}
		return "", client.Errorf(taxonomy.KindPrecondition, "", "--agentd %s is not an executable file", explicit)
	}
	if v := getenv(AgentdEnv); v != "" {
		if p, ok := try("$"+AgentdEnv, v); ok {
			return p, nil
		}
		return "", client.Errorf(taxonomy.KindPrecondition, "", "$%s=%s is not an executable file", AgentdEnv, v)
	}
	if self, err := os.Executable(); err == nil {
		if p, ok := try("next to the microvm executable", filepath.Join(filepath.Dir(self), "agentd")); ok {
			return p, nil
		}
	} else {
		searched = append(searched, "next to the microvm executable (unknown: "+err.Error()+")")
	}
	p, err := exec.LookPath("agentd")
	if err == nil {
		return filepath.Abs(p)
	}
	if !errors.Is(err, exec.ErrNotFound) {
		searched = append(searched, "PATH ("+err.Error()+")")
	} else {
		searched = append(searched, "PATH")
	}
	return "", client.Errorf(taxonomy.KindPrecondition, "",
		"no host agentd for the emulator's guests; searched %s. Build it with `make build` (bin/agentd next to bin/microvm), or pass --agentd PATH or set %s",
		strings.Join(searched, ", "), AgentdEnv)
}
