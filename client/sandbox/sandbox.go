package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Sandbox is one launched MicroVM. Its methods are safe for concurrent use;
// lifecycle operations are serialised.
type Sandbox struct {
	cp   *lambdamicrovms.Client
	opts Options
	id   string
	ref  cplane.ImageRef

	op sync.Mutex // one lifecycle operation at a time

	mu          sync.Mutex
	m           model
	session     *client.Session
	window      time.Duration // suspendedDurationSeconds, as GetMicrovm reports it
	suspendedAt time.Time
	cycles      int           // suspends that landed
	frozen      time.Duration // time held SUSPENDED, summed over resumed cycles
	endpoint    string
	token       string        // the agent token, handed out only by AgentToken
	maxIdle     time.Duration // the idle policy's maxIdleDurationSeconds, zero without one
	deadline    time.Time     // startedAt plus maximumDurationInSeconds
}

// ID is the MicroVM id, "" before RunMicrovm answered.
func (s *Sandbox) ID() string { return s.id }

// Lifecycle is the last state the platform confirmed (or the one a call
// this sandbox sent moved it to).
func (s *Sandbox) Lifecycle() Lifecycle { s.mu.Lock(); defer s.mu.Unlock(); return s.m.lifecycle }

// TokenInstalled reports whether the run hook installed the agent token.
func (s *Sandbox) TokenInstalled() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.m.tokenInstalled }

// ImageExists reports whether the launch was accepted from an existing image.
func (s *Sandbox) ImageExists() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.m.imageExists }

// WasTerminated reports whether the VM was terminated, by us or the platform.
func (s *Sandbox) WasTerminated() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.m.wasTerminated }

// BootstrapCount is how many times the agent token was installed: 0 or 1.
func (s *Sandbox) BootstrapCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.m.bootstrapCount }

// SuspendedWindow is how long a suspended VM survives before the platform
// terminates it, as GetMicrovm's idlePolicy reported it; zero when unknown.
func (s *Sandbox) SuspendedWindow() time.Duration { s.mu.Lock(); defer s.mu.Unlock(); return s.window }

// AgentToken is the bearer the VM's agentd accepts, for a caller that keeps
// the VM and attaches to it later (microvm run --keep reports it). The
// sandbox itself never logs, prints or persists it.
func (s *Sandbox) AgentToken() string { return s.token }

// Endpoint is the VM's endpoint as GetMicrovm last reported it (a bare host).
func (s *Sandbox) Endpoint() string { s.mu.Lock(); defer s.mu.Unlock(); return s.endpoint }

// Session is the session bound to the VM's endpoint, nil before RUNNING.
func (s *Sandbox) Session() *client.Session { s.mu.Lock(); defer s.mu.Unlock(); return s.session }

func (s *Sandbox) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

func (s *Sandbox) apply(f func(*model)) { s.mu.Lock(); f(&s.m); s.mu.Unlock() }

// newAgentToken is 32 random bytes, hex: the bearer agentd will accept. It
// lives only in the payload and the session, never in a log or the ledger.
func newAgentToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Launch runs a MicroVM and waits for RUNNING. Whenever RunMicrovm answered,
// the returned Sandbox is non-nil even with an error (a launch that died, a
// wait that timed out), so the caller can still Terminate it and learn what
// leaked.
func Launch(ctx context.Context, c *lambdamicrovms.Client, o Options) (*Sandbox, error) {
	if o.Port == 0 {
		o.Port = taxonomy.DefaultAgentPort
	}
	ref, err := cplane.ParseImageRef(o.Image)
	if err != nil {
		return nil, err
	}
	if !ref.IsARN() {
		return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingImageARNColon, "launch needs the image's ARN, not the name %q", o.Image)
	}
	token := o.AgentToken
	if token == "" {
		if token, err = newAgentToken(); err != nil {
			return nil, client.Errorf(taxonomy.KindUnexpected, "", "minting the agent token: %w", err)
		}
	}
	// The ceiling is checked here, before any call.
	payload, err := cplane.NewRunHookPayload(token, o.Env)
	if err != nil {
		return nil, err
	}
	if o.Network != nil {
		// Refused on AWS before anything is sent, the ledger included.
		if err := CheckNetwork(c); err != nil {
			return nil, err
		}
	}
	s := &Sandbox{cp: c, opts: o, ref: ref, m: newModel(), token: token}
	var after func(string, error) error
	if o.Ledger != nil {
		if after, err = o.Ledger.Before("RunMicrovm", o.Image); err != nil {
			return nil, err
		}
	}
	in, err := runInput(c.Options().Region, ref.String(), o, payload)
	if err != nil {
		return nil, err
	}
	var runOpts []func(*lambdamicrovms.Options)
	if o.Network != nil {
		opt, err := registerLaunchNetwork(ctx, c, o.Network)
		if err != nil {
			if after != nil {
				_ = after("", err)
			}
			return nil, err
		}
		runOpts = append(runOpts, opt)
	}
	run, err := s.api().RunMicrovm(ctx, in, runOpts...)
	err = cplane.SDKError("RunMicrovm", err)
	if after != nil {
		id := ""
		if run != nil {
			id = aws.ToString(run.MicrovmId)
		}
		if lerr := after(id, err); lerr != nil && err == nil {
			err = lerr
		}
	}
	if err != nil {
		if run == nil {
			return nil, err
		}
	}
	s.id, s.endpoint = aws.ToString(run.MicrovmId), aws.ToString(run.Endpoint)
	s.apply((*model).launchAccepted)
	if o.Ledger != nil {
		_ = o.Ledger.Update(func(r *ledger.Run) { r.MicrovmID = s.id })
	}
	if err != nil {
		return s, err
	}
	got, err := s.waitFor(ctx, types.MicrovmStateRunning)
	if err != nil {
		if client.KindOf(err) == taxonomy.KindLaunchDied {
			s.apply((*model).diedBeforeRunning)
		}
		return s, err
	}
	// RUNNING is reported only after the run hook answered 200: the platform
	// forwards no traffic before it. So the token is installed now.
	s.mu.Lock()
	err = s.m.bootstrapped()
	s.observeLocked(got)
	s.mu.Unlock()
	if err != nil {
		return s, err
	}
	sess, err := client.Proxied(cplane.EndpointURL(s.endpoint), token, ProxyMinter(s.api(), s.id), s.sessionOptions(o)...)
	if err != nil {
		return s, err
	}
	s.mu.Lock()
	s.session = sess
	s.mu.Unlock()
	return s, nil
}

// observeLocked takes what GetMicrovm says about the window. The platform's
// figure is read rather than the one requested, since that is the window it
// enforces.
func (s *Sandbox) observeLocked(g *lambdamicrovms.GetMicrovmOutput) {
	if g == nil {
		return
	}
	if g.IdlePolicy != nil && g.IdlePolicy.SuspendedDurationSeconds != nil && *g.IdlePolicy.SuspendedDurationSeconds > 0 {
		s.window = time.Duration(*g.IdlePolicy.SuspendedDurationSeconds) * time.Second
	}
	if g.Endpoint != nil && *g.Endpoint != "" {
		s.endpoint = *g.Endpoint
	}
	s.observeClocksLocked(g)
}

// Suspend freezes a RUNNING VM and waits for SUSPENDED. Its filesystem,
// processes and installed token survive.
func (s *Sandbox) Suspend(ctx context.Context) error {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	err := s.m.suspend()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.billable(ctx, "SuspendMicrovm", func() error { return s.suspendVM(ctx) }); err != nil {
		// Not sent, or refused: the VM is still RUNNING as far as anyone knows.
		s.apply(func(m *model) { m.lifecycle = Running })
		return err
	}
	got, err := s.waitFor(ctx, types.MicrovmStateSuspended)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if g, gerr := s.getMicrovm(ctx); gerr == nil && isDead(g.State) {
			s.m.terminated()
		}
		return err
	}
	s.m.suspended()
	s.observeLocked(got)
	s.suspendedAt = s.now()
	return nil
}

func isDead(st types.MicrovmState) bool {
	return st == types.MicrovmState(Terminated) || st == types.MicrovmState(Terminating)
}

// Resume thaws a SUSPENDED VM and waits for RUNNING. Nothing is re-delivered:
// the token installed at launch survived the freeze. The cached proxy token is
// dropped, since one minted before the suspend may have outlived its hour.
// Past the suspended window the platform has already terminated the VM, so
// the resume fails as WindowClosed naming that window.
func (s *Sandbox) Resume(ctx context.Context) error {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	if err := s.m.resume(); err != nil {
		s.mu.Unlock()
		return err
	}
	window, since := s.window, s.now().Sub(s.suspendedAt)
	s.mu.Unlock()
	if window > 0 && since > window {
		// Refused without sending: the platform ends a suspended VM once the
		// window passes. The read only brings the model up to date.
		if g, err := s.getMicrovm(ctx); err == nil {
			s.observeDead(g)
		}
		return s.windowClosed(window, since)
	}
	err := s.billable(ctx, "ResumeMicrovm", func() error { return s.resumeVM(ctx) })
	if err != nil {
		if g, gerr := s.getMicrovm(ctx); gerr == nil && isDead(g.State) {
			s.observeDead(g)
			return s.windowClosed(window, since)
		}
		return err
	}
	got, err := s.waitFor(ctx, types.MicrovmStateRunning)
	if err != nil {
		if client.KindOf(err) == taxonomy.KindLaunchDied {
			s.apply((*model).terminated)
			return s.windowClosed(window, since)
		}
		return err
	}
	s.mu.Lock()
	s.m.resumed()
	s.cycles++
	s.frozen += s.now().Sub(s.suspendedAt)
	s.suspendedAt = time.Time{}
	s.observeLocked(got)
	sess := s.session
	s.mu.Unlock()
	if sess != nil {
		sess.Invalidate()
	}
	return nil
}

func (s *Sandbox) observeDead(g *lambdamicrovms.GetMicrovmOutput) {
	if isDead(g.State) {
		s.apply((*model).terminated)
	}
}

func (s *Sandbox) windowClosed(window, since time.Duration) error {
	return client.Errorf(taxonomy.KindWindowClosed, taxonomy.FindingIdlePolicy,
		"MicroVM %s was suspended %s ago and its suspended window (idlePolicy.suspendedDurationSeconds=%d) has passed, so the platform has terminated it; launch a new one",
		s.id, since.Round(time.Second), int(window/time.Second))
}

// billable records call in the ledger before sending it and its outcome after.
func (s *Sandbox) billable(ctx context.Context, op string, call func() error) error {
	if s.opts.Ledger == nil {
		return call()
	}
	after, err := s.opts.Ledger.Before(op, s.id)
	if err != nil {
		return err
	}
	cerr := call()
	if lerr := after("", cerr); lerr != nil && cerr == nil {
		return lerr
	}
	return cerr
}

// String names the sandbox by its MicroVM id and never shows the agent
// token, under %v and %+v alike.
func (s *Sandbox) String() string { return "Sandbox(" + s.id + ")" }

// GoString is String, so %#v redacts the token too.
func (s *Sandbox) GoString() string { return s.String() }
