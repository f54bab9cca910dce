package localvm

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/microvms/microvms/internal/netpolicy"
	"github.com/microvms/microvms/internal/wideconn"
	"github.com/microvms/microvms/localvm/guestinit"
)

// Launcher starts the guest of one MicroVM. ctx ends when the caller (the
// emulator) closes; a launcher must not return before the guest's hook port
// accepts connections, since the run hook is posted as soon as it returns.
// It is the whole seam between a control plane and a backend: the emulator
// (emulator.Options.VMs) knows guests only through it.
type Launcher func(ctx context.Context, spec GuestSpec) (*Guest, error)

// GuestSpec is what a Launcher is asked to start.
type GuestSpec struct {
	MicrovmID    string
	ImageArn     string
	ImageVersion string
	// HookPort is the guest port the lifecycle hooks are served on: the
	// image version's hooks.port, else 9000.
	HookPort int
	// Env is the image version's environment: its Dockerfile's ENV lines
	// (for an image built from a local artifact) overlaid by its
	// environmentVariables (nil when neither sets anything).
	Env map[string]string
	// Daemon is the agentd the image's local artifact carries; empty means
	// the launcher's own.
	Daemon string
	// Workdir is the image's WORKDIR inside the guest's root, made there and
	// the daemon's working directory; empty when none was set.
	Workdir string
	// Egress is true when the launch asked for an egress network connector:
	// only then may the guest reach anything outside itself.
	Egress bool
	// Network, when set, is the guest's network under a policy (issue 48):
	// its only link besides the loopback is a tun served by Network
	// outside the guest until the guest ends, its resolver and trust store
	// are Network's, and Egress is ignored (no slirp4netns). A launcher
	// that cannot do this must refuse the launch, never run the guest
	// without its policy.
	Network *netpolicy.Net
	// MemoryMiB is the image's minimumMemoryInMiB, which picks the size
	// class a confined guest is limited to; 0 is the default class.
	MemoryMiB int
	// WritableMiB bounds a confined guest's writable layer; 0 is
	// taxonomy.LocalGuestWritableMiB.
	WritableMiB int
	// RootDir is the image's root filesystem on this machine, when the
	// emulator has one; "" means the guest is built from the host's system
	// directories.
	RootDir string
}

// Guest is one running MicroVM as its Launcher reports it.
type Guest struct {
	// Ports maps each guest port that has a listener to the loopback
	// host:port serving it. The endpoint proxy forwards X-aws-proxy-port P to
	// Ports[P]; a port in the token's scope but absent here answers 502, as
	// the platform answers for a scoped port with nothing listening. For a
	// guest with Dial the addresses are the guest's own, inside its network
	// namespace: dialing them from the host reaches something else.
	Ports map[int]string
	// Dial, when set, is how the emulator reaches guest port P (the run hook
	// and the endpoint proxy use it instead of Ports): a guest in its own
	// network namespace is dialed from inside it. A port with nothing
	// listening fails the dial, which the proxy answers 502.
	Dial func(ctx context.Context, port int) (net.Conn, error)
	// Freeze stops every guest process where it stands and Thaw lets them
	// continue: the platform's suspend is a freeze, not a stop and start
	// (finding suspend-is-freeze). Nil means the guest cannot be frozen; the
	// proxy still refuses traffic while the MicroVM is suspended.
	Freeze, Thaw func() error
	// Limits says which of a confined guest's resource limits hold.
	Limits LimitsReport
	// Stop ends the guest and releases what it holds. The emulator calls it
	// exactly once.
	Stop func()
	// Exited, when set, is closed once the guest's daemon has exited for
	// any reason (a terminate hook sent from outside, a crash, a kill).
	// Without it the emulator finds out by dialing the hook port.
	Exited <-chan struct{}

	transportOnce sync.Once
	transport     *http.Transport // built from Dial on first use
}

// RoundTripper is how the emulator sends HTTP to g: through Dial when the
// guest has one, else through loopback (the caller's shared transport) to
// the addresses of Ports.
func (g *Guest) RoundTripper(loopback http.RoundTripper) http.RoundTripper {
	if g.Dial == nil {
		return loopback
	}
	g.transportOnce.Do(func() {
		g.transport = &http.Transport{
			Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second, DisableCompression: true,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				_, p, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				port, err := strconv.Atoi(p)
				if err != nil {
					return nil, err
				}
				c, err := g.Dial(ctx, port)
				if err != nil {
					return nil, err
				}
				return wideconn.Conn(c), nil
			},
		}
	})
	return g.transport
}

// Release ends the guest and drops the connections held to it; the
// emulator calls it exactly once, in place of Stop.
func (g *Guest) Release() {
	if g.transport != nil {
		g.transport.CloseIdleConnections()
	}
	g.Stop()
}

// StepCommand is one build step's process: its argv, environment, working
// directory and the image user it runs as (the guest's init runs it).
type StepCommand = guestinit.StepCommand
