package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/microvms/microvms/localvm"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// runHookTimeout is how long the emulator waits for the run hook: the
// image's runTimeoutInSeconds, else the 60-second ceiling.
func runHookTimeout(spec cp.UpdateMicrovmImageRequest) time.Duration {
	sec := taxonomy.MaxRunHookTimeoutSec
	if h := spec.Hooks; h != nil && h.MicrovmHooks != nil && h.MicrovmHooks.RunTimeoutInSeconds != nil && *h.MicrovmHooks.RunTimeoutInSeconds > 0 {
		sec = *h.MicrovmHooks.RunTimeoutInSeconds
	}
	return time.Duration(sec) * time.Second
}

// runHookEnabled is true only for an image that enabled its run hook: the
// model's default for microvmHooks.run is DISABLED, so an image that says
// nothing gets no run hook (and its daemon no token). client/build enables
// it explicitly.
func runHookEnabled(spec cp.UpdateMicrovmImageRequest) bool {
	h := spec.Hooks
	return h != nil && h.MicrovmHooks != nil && h.MicrovmHooks.Run != nil && *h.MicrovmHooks.Run == cp.ENABLED
}

func guestSpec(vm *microvm, v *version) GuestSpec {
	port := taxonomy.DefaultAgentPort
	if h := v.spec.Hooks; h != nil && h.Port != nil {
		port = *h.Port
	}
	var env map[string]string
	spec := GuestSpec{MicrovmID: vm.id, ImageArn: vm.imageArn, ImageVersion: vm.version, HookPort: port}
	if l := v.local; l != nil {
		env = maps.Clone(l.Env)
		spec.Daemon, spec.Workdir, spec.RootDir = l.Daemon, l.Workdir, l.Root
	}
	if v.spec.EnvironmentVariables != nil {
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, *v.spec.EnvironmentVariables)
	}
	spec.Env = env
	if r := v.spec.Resources; r != nil && len(*r) > 0 {
		spec.MemoryMiB = (*r)[0].MinimumMemoryInMiB
	}
	spec.Egress = vm.req.EgressNetworkConnectors != nil && len(*vm.req.EgressNetworkConnectors) > 0
	spec.Network = vm.net
	return spec
}

// startGuest is RunMicrovm's half of the VM backend, called with s.mu held:
// it opens the MicroVM's endpoint (so RunMicrovm can return it) and starts
// the launch in the background, as the platform answers RunMicrovm with
// PENDING before the guest has booted.
func (s *Server) startGuest(vm *microvm, v *version, payload *string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// The platform returns a bare host; so does the emulator. It is loopback,
	// which control.EndpointURL completes with http:// (finding
	// endpoint-bare-host).
	vm.endpoint = l.Addr().String()
	srv := &http.Server{Handler: s.endpointHandler(vm), ReadHeaderTimeout: 10 * time.Second}
	s.proxies = append(s.proxies, srv)
	go func() { _ = srv.Serve(l) }()
	if vm.plan.DieReason != "" {
		// An injected dead launch: no guest to start; observeVM terminates it.
		return nil
	}
	// The platform wraps the caller's string rather than sending it as the
	// body (finding run-hook-payload-wrapped). With no payload the field is
	// left out: what the platform sends then is unmeasured.
	wrapped := map[string]string{}
	if payload != nil {
		wrapped["runHookPayload"] = *payload
		if vm.net != nil {
			wrapped["runHookPayload"] = withNetworkEnv(*payload, localvm.NetworkEnv(vm.net))
		}
	}
	body, _ := json.Marshal(wrapped)
	vm.launching, vm.launched = true, make(chan struct{})
	s.trace(vm.id, TraceAccepted)
	s.wg.Add(1)
	spec := guestSpec(vm, v)
	vm.agentPort, vm.agentToken = spec.HookPort, shellAgentToken(payload) // for the shell endpoint (shell.go)
	go s.launch(vm, spec, body, runHookEnabled(v.spec), runHookTimeout(v.spec))
	return nil
}

// launch starts the guest and delivers the run hook. Until it returns, the
// MicroVM stays PENDING however often it is observed: the platform reports
// RUNNING only after the hook answered 200, and forwards no traffic before.
func (s *Server) launch(vm *microvm, spec GuestSpec, body []byte, hook bool, timeout time.Duration) {
	defer s.wg.Done()
	reason := ""
	g, err := s.opt.VMs(s.ctx, spec)
	switch {
	case err != nil:
		g, reason = nil, "MicroVM failed to start: "+err.Error()
	case hook:
		s.trace(vm.id, TraceGuestListening)
		addr := g.Ports[spec.HookPort]
		if g.Dial != nil {
			addr = "127.0.0.1:" + strconv.Itoa(spec.HookPort)
		}
		reason = postRunHook(s.ctx, g.RoundTripper(proxyTransport), addr, body, timeout)
		s.trace(vm.id, TraceRunHook)
	default:
		s.trace(vm.id, TraceGuestListening)
	}
	s.mu.Lock()
	vm.launching = false
	close(vm.launched)
	dead := vm.state == cp.MicrovmStateTERMINATING || vm.state == cp.MicrovmStateTERMINATED || s.ctx.Err() != nil
	switch {
	case reason != "":
		// The platform's answer to a failed run hook: the VM is terminated
		// before RUNNING with the hook's status as its stateReason (finding
		// dead-before-running).
		vm.plan.DieReason = reason
		if s.opt.WallClock && !dead {
			now := s.now()
			vm.state, vm.reason, vm.terminatedAt = cp.MicrovmStateTERMINATED, ptr(reason), &now
		}
	case !dead:
		if missing := g.Limits.Missing; len(missing) > 0 && s.opt.Warn != nil {
			s.opt.Warn(limitsWarning(vm.id, missing))
		}
		vm.guest, g = g, nil
		if s.opt.WallClock && vm.state == cp.MicrovmStatePENDING {
			vm.state = cp.MicrovmStateRUNNING
			s.trace(vm.id, TraceRunning)
		}
		s.wg.Add(1)
		go s.watchGuest(vm, vm.guest, spec.HookPort)
	}
	s.mu.Unlock()
	if g != nil {
		g.Release()
	}
}

// launchHold bounds how long a GetMicrovm waits for a launch in flight.
// A waiter polls the emulator every few milliseconds and backs off; a
// launch ends between two polls, and the backoff's overshoot was 13 ms at
// the median and 69 ms at p95 of create → first output (BenchmarkTTI). A
// read that arrives mid-launch is answered when the launch ends instead,
// so the waiter sees RUNNING as it happens, and a launch slower than the
// bound still reads PENDING, as the platform's does.
const launchHold = 500 * time.Millisecond

// awaitLaunch holds a read of vm while its guest starts, until the launch
// ends, ctx ends or launchHold passes; called with s.mu held, which it
// releases while it waits. Only a wall-clock emulator holds: in step mode
// each read is one step and must answer at once.
func (s *Server) awaitLaunch(ctx context.Context, vm *microvm) {
	if !s.opt.WallClock || !vm.launching || vm.launched == nil {
		return
	}
	done := vm.launched
	s.mu.Unlock()
	defer s.mu.Lock()
	t := time.NewTimer(launchHold)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-s.ctx.Done():
	case <-t.C:
	}
}

// limitsWarning is what a user is told of a guest that runs without some
// of its limits: the emulator cannot hold it to its size class there.
func limitsWarning(id string, missing []string) string {
	return "MicroVM " + id + " runs without some limits (microvm doctor --local says why): " + strings.Join(missing, "; ")
}

// guestExitedReason is the stateReason of a MicroVM whose daemon exited. The
// emulator's own words: what the platform reports when a guest's main
// process exits is unmeasured (docs/PLATFORM.md, "Platform hooks arrive over
// loopback").
const guestExitedReason = "The MicroVM's main process exited, so the MicroVM was terminated."

// guestProbeInterval is how often the hook port of a guest without Exited is
// dialed; two refused dials in a row are its death.
const guestProbeInterval = 500 * time.Millisecond

// watchGuest terminates vm once its guest's daemon has exited, whatever
// ended it, so GetMicrovm never reports a dead guest RUNNING: a terminate
// hook sent through the proxy once killed the guest while the control plane
// went on saying RUNNING. It returns when the guest is detached (terminate,
// expiry, Close) or found dead.
func (s *Server) watchGuest(vm *microvm, g *Guest, hookPort int) {
	defer s.wg.Done()
	tick := time.NewTicker(guestProbeInterval)
	defer tick.Stop()
	refused := 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-g.Exited:
			s.guestDied(vm, g)
			return
		case <-tick.C:
		}
		s.mu.Lock()
		attached := vm.guest == g
		probe := g.Exited == nil && vm.state == cp.MicrovmStateRUNNING && vm.freezeErr == nil
		s.mu.Unlock()
		if !attached {
			return
		}
		if !probe {
			refused = 0
			continue
		}
		if dialGuest(s.ctx, g, hookPort) {
			refused = 0
			continue
		}
		if refused++; refused >= 2 {
			s.guestDied(vm, g)
			return
		}
	}
}

// dialGuest reports whether something accepts a connection on the guest's
// hook port.
func dialGuest(ctx context.Context, g *Guest, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var c net.Conn
	var err error
	if g.Dial != nil {
		c, err = g.Dial(ctx, port)
	} else if addr, ok := g.Ports[port]; ok {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	} else {
		return true // nothing to probe: assume alive
	}
	if err != nil {
		return ctx.Err() != nil // a slow dial is a busy guest, not a dead one
	}
	c.Close()
	return true
}

// guestDied moves vm to TERMINATED, as the platform ends a MicroVM whose
// main process is gone, and releases what the guest held.
func (s *Server) guestDied(vm *microvm, g *Guest) {
	s.mu.Lock()
	if vm.guest != g {
		s.mu.Unlock()
		return
	}
	vm.detachGuest()
	if vm.state != cp.MicrovmStateTERMINATED {
		now := s.now()
		vm.state, vm.reason, vm.terminatedAt = cp.MicrovmStateTERMINATED, ptr(guestExitedReason), &now
	}
	s.mu.Unlock()
	g.Release()
}

// postRunHook delivers the wrapped payload and returns "" on a 200, else
// the stateReason the MicroVM dies with.
func postRunHook(ctx context.Context, rt http.RoundTripper, addr string, body []byte, timeout time.Duration) string {
	if addr == "" {
		return "Run lifecycle hook failed: nothing listens on the hook port."
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+taxonomy.HookPrefix+"/run", bytes.NewReader(body))
	if err != nil {
		return "Run lifecycle hook failed: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	// The platform's hook arrives over loopback addressed to localhost
	// (finding hooks-over-loopback).
	req.Host = "localhost"
	// No keep-alive: the hook is one request, and the proxy's connections
	// to the guest start after it.
	req.Close = true
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return "Run lifecycle hook failed: " + err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Worded as the platform words it.
		return fmt.Sprintf("Run lifecycle hook returned HTTP status %d. Please check your hook endpoint and application logs for more details.", resp.StatusCode)
	}
	return ""
}

// freeze, thaw and stopGuest apply a lifecycle step to vm's guest, if it
// has one; called with s.mu held. A freeze failure is not hidden: the VM
// still reports SUSPENDED (the control plane decided), but the proxy keeps
// refusing traffic, so nothing reaches a half-frozen guest.
func (vm *microvm) freeze() {
	if vm.guest != nil && vm.guest.Freeze != nil {
		vm.freezeErr = vm.guest.Freeze()
	}
}

func (vm *microvm) thaw() {
	if vm.guest != nil && vm.guest.Thaw != nil {
		vm.freezeErr = vm.guest.Thaw()
	}
}

// detachGuest takes vm's guest for the caller to stop outside s.mu.
func (vm *microvm) detachGuest() *Guest {
	g := vm.guest
	vm.guest = nil
	return g
}

// Close stops every guest and endpoint proxy the server started. It does
// not stop a listener of ServeLoopback; that function's stop calls Close.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait() // launches in flight see the cancelled context and stop their guest
	s.mu.Lock()
	var guests []*Guest
	for _, vm := range s.vms {
		if g := vm.detachGuest(); g != nil {
			guests = append(guests, g)
		}
	}
	proxies := s.proxies
	s.proxies = nil
	s.mu.Unlock()
	for _, g := range guests {
		g.Release()
	}
	for _, p := range proxies {
		_ = p.Close()
	}
	s.mu.Lock()
	if s.tmpState && s.stateDir != "" {
		_ = os.RemoveAll(s.stateDir)
		s.stateDir, s.tmpState = "", false
	}
	s.mu.Unlock()
}

// state is the state directory, made on first use; called with s.mu held.
func (s *Server) state() (string, error) {
	if s.stateDir != "" {
		return s.stateDir, nil
	}
	if s.opt.StateDir != "" {
		if err := os.MkdirAll(s.opt.StateDir, 0o700); err != nil {
			return "", err
		}
		s.stateDir = s.opt.StateDir
		return s.stateDir, nil
	}
	localvm.SweepStaleStateOnce()
	dir, err := os.MkdirTemp("", "microvm-"+localvm.StateDirPrefix("store"))
	if err != nil {
		return "", err
	}
	s.stateDir, s.tmpState = dir, true
	return dir, nil
}

// GuestLimits says which resource limits hold for MicroVM id's guest; ok is
// false while it has no running guest.
func (s *Server) GuestLimits(id string) (l LimitsReport, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm := s.vms[id]
	if vm == nil || vm.guest == nil {
		return LimitsReport{}, false
	}
	return vm.guest.Limits, true
}
