package emulator

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/netpolicy"
)

// microvm is one MicroVM and where its lifecycle stands.
type microvm struct {
	id, imageArn, version, endpoint string
	req                             cp.RunMicrovmRequest
	state                           cp.MicrovmState
	reason                          *string
	startedAt                       float64
	terminatedAt                    *float64
	plan                            LaunchPlan
	seen                            int
	resumed                         bool
	tokens                          []string
	suspendedAt                     time.Time // by Options.Now, when the last suspend was accepted
	started                         time.Time // by Options.Now: maximumDurationInSeconds counts from here
	lastInbound                     time.Time // by Options.Now: the idle policy's silence counts from here

	// The VM backend (Options.VMs); all zero without it.
	grants     map[string]grant // proxy token -> what it reaches
	guest      *Guest           // set once the run hook answered 200: the endpoint forwards
	launching  bool             // the guest is starting or its run hook is in flight
	launched   chan struct{}    // closed when launching ends (awaitLaunch)
	freezeErr  error            // a failed freeze or thaw: the proxy forwards nothing
	agentPort  int              // the guest port agentd listens on, for the shell endpoint (shell.go)
	agentToken string           // the run hook's agent token, kept (never answered) for the shell endpoint
	net        *netpolicy.Net   // the guest's network under a policy (network.go); nil without one
}

// expire applies the platform's clock-driven transitions to vm, by
// Options.Now, in every mode; called with s.mu held before a VM is read or
// acted on (finding idle-policy):
//
//   - RUNNING with no inbound endpoint request for the idlePolicy's
//     maxIdleDurationSeconds is SUSPENDED, its guest frozen as
//     SuspendMicrovm freezes it;
//   - SUSPENDED for longer than suspendedDurationSeconds is TERMINATED;
//   - any VM past maximumDurationInSeconds (28800 when unset) is TERMINATED.
//
// Each happens at the instant it was due, not when it was noticed, so a
// read long after an idle suspend sees the suspended window already run
// from the suspend (and maybe expired). The stateReason sentences are the
// emulator's own: the platform's wording is unmeasured.
func (s *Server) expire(vm *microvm) {
	if vm.state == cp.MicrovmStateTERMINATED || vm.state == cp.MicrovmStateTERMINATING {
		return
	}
	now, unit := s.opt.Now(), s.idleUnit()
	maxDur := taxonomy.MaxDurationSec
	if d := vm.req.MaximumDurationInSeconds; d != nil {
		maxDur = *d
	}
	deadline := vm.started.Add(time.Duration(maxDur) * unit)
	p := vm.req.IdlePolicy
	if p != nil && vm.state == cp.MicrovmStateRUNNING && !vm.lastInbound.IsZero() {
		if due := vm.lastInbound.Add(time.Duration(p.MaxIdleDurationSeconds) * unit); !now.Before(due) && due.Before(deadline) {
			vm.state, vm.suspendedAt = cp.MicrovmStateSUSPENDED, due
			vm.reason = ptr(fmt.Sprintf("The MicroVM received no inbound request for its idlePolicy.maxIdleDurationSeconds (%d) and was suspended.", p.MaxIdleDurationSeconds))
			vm.freeze()
		}
	}
	if p != nil && (vm.state == cp.MicrovmStateSUSPENDED || vm.state == cp.MicrovmStateSUSPENDING) {
		due := vm.suspendedAt.Add(time.Duration(p.SuspendedDurationSeconds) * unit)
		if now.After(due) && due.Before(deadline) {
			s.end(vm, due, fmt.Sprintf("The MicroVM was suspended for longer than its idlePolicy.suspendedDurationSeconds (%d) and was terminated.", p.SuspendedDurationSeconds))
			return
		}
	}
	if !now.Before(deadline) {
		s.end(vm, deadline, fmt.Sprintf("The MicroVM reached its maximumDurationInSeconds (%d) and was terminated.", maxDur))
	}
}

// end terminates vm as the platform does on its own, at the instant at;
// called with s.mu held.
func (s *Server) end(vm *microvm, at time.Time, reason string) {
	t := float64(at.UnixMilli()) / 1000
	vm.state, vm.terminatedAt, vm.reason = cp.MicrovmStateTERMINATED, &t, ptr(reason)
	if g := vm.detachGuest(); g != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); g.Stop() }()
	}
}

// idleUnit is how long one second of an idle policy or a maximum duration
// lasts here: a second, unless Options.IdleUnit shortens it for a test.
func (s *Server) idleUnit() time.Duration {
	if s.opt.IdleUnit > 0 {
		return s.opt.IdleUnit
	}
	return time.Second
}

// arrive records one authorized inbound request through vm's endpoint, the
// only thing the idle policy counts (an open stream's bytes do not: the
// platform's reading is unmeasured and this is the conservative one), and
// auto-resumes a SUSPENDED VM whose idlePolicy asks for it, so the request
// is then served. It returns the state the request meets.
func (s *Server) arrive(vm *microvm) (cp.MicrovmState, *Guest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(vm)
	now := s.opt.Now()
	switch {
	case vm.state == cp.MicrovmStateRUNNING:
		vm.lastInbound = now
	case vm.state == cp.MicrovmStateSUSPENDED && vm.req.IdlePolicy != nil && vm.req.IdlePolicy.AutoResumeEnabled:
		// The resume completes before the request is forwarded: how long
		// the platform's takes is unmeasured, and a caller keeps its own
		// deadline either way.
		vm.thaw()
		vm.state, vm.reason, vm.lastInbound = cp.MicrovmStateRUNNING, nil, now
	}
	return vm.state, vm.guest, vm.freezeErr
}

// sweep applies expire to every VM on a ticker, so in WallClock mode an
// idle VM's guest is frozen (and an expired one stopped) when it is due,
// not only when someone next looks.
func (s *Server) sweep() {
	defer s.wg.Done()
	every := s.idleUnit()
	if every > time.Second {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		for _, vm := range s.vms {
			s.expire(vm)
		}
		s.mu.Unlock()
	}
}

// observeVM advances a VM one step along the transition it is in.
func (s *Server) observeVM(vm *microvm) {
	s.expire(vm)
	switch vm.state {
	case cp.MicrovmStatePENDING:
		if vm.launching {
			// RUNNING waits for the run hook's answer, however often the
			// VM is observed.
			return
		}
		vm.seen++
		if !s.opt.WallClock && vm.seen < max(vm.plan.Steps, 1) {
			return
		}
		if vm.plan.DieReason != "" && !vm.resumed {
			now := s.now()
			vm.state, vm.reason, vm.terminatedAt = cp.MicrovmStateTERMINATED, ptr(vm.plan.DieReason), &now
			return
		}
		vm.state, vm.lastInbound = cp.MicrovmStateRUNNING, s.opt.Now()
	case cp.MicrovmStateSUSPENDING:
		vm.state = cp.MicrovmStateSUSPENDED
	case cp.MicrovmStateTERMINATING:
		now := s.now()
		vm.state, vm.terminatedAt = cp.MicrovmStateTERMINATED, &now
	}
}

func (s *Server) vmReply(vm *microvm) cp.GetMicrovmResponse {
	dur := 28800
	if vm.req.MaximumDurationInSeconds != nil {
		dur = *vm.req.MaximumDurationInSeconds
	}
	return cp.GetMicrovmResponse{
		EgressNetworkConnectors: vm.req.EgressNetworkConnectors, Endpoint: vm.endpoint, ExecutionRoleArn: vm.req.ExecutionRoleArn,
		IdlePolicy: vm.req.IdlePolicy, ImageArn: vm.imageArn, ImageVersion: vm.version,
		IngressNetworkConnectors: vm.req.IngressNetworkConnectors, MaximumDurationInSeconds: dur, MicrovmId: vm.id,
		StartedAt: vm.startedAt, State: vm.state, StateReason: vm.reason, TerminatedAt: vm.terminatedAt,
	}
}

func (s *Server) findVM(w http.ResponseWriter, id string) *microvm {
	vm := s.vms[id]
	if vm == nil {
		notFound(w, "MicroVM", id)
	}
	return vm
}

func (s *Server) RunMicrovm(w http.ResponseWriter, r *http.Request) {
	var req cp.RunMicrovmRequest
	if !decode(w, r, &req) {
		return
	}
	bad := func(msg string) { writeError(w, http.StatusBadRequest, "ValidationException", ptr(msg)) }
	if p := req.RunHookPayload; p != nil && len(*p) > taxonomy.MaxRunHookPayloadBytes { // UTF-8 bytes, not characters: the measured ceiling
		bad(fmt.Sprintf("1 validation error detected: Value at 'runHookPayload' failed to satisfy constraint: Member must have length less than or equal to %d", taxonomy.MaxRunHookPayloadBytes))
		return
	}
	if d := req.MaximumDurationInSeconds; d != nil && (*d < taxonomy.MinDurationSec || *d > taxonomy.MaxDurationSec) {
		bad(fmt.Sprintf("1 validation error detected: Value at 'maximumDurationInSeconds' failed to satisfy constraint: Member must have value between %d and %d", taxonomy.MinDurationSec, taxonomy.MaxDurationSec))
		return
	}
	if p := req.IdlePolicy; p != nil && p.MaxIdleDurationSeconds < taxonomy.MinIdleDurationSec {
		bad("idlePolicy.maxIdleDurationSeconds: Member must have value greater than or equal to 60")
		return
	}
	for _, list := range []*[]string{req.IngressNetworkConnectors, req.EgressNetworkConnectors} {
		if list == nil {
			continue
		}
		for _, c := range *list {
			if !connectorARN(c) {
				bad("Malformed network connector ARN")
				return
			}
		}
	}
	if !strings.HasPrefix(req.ImageIdentifier, "arn:") {
		bad("Malformed ARN - doesn't start with 'arn:'")
		return
	}
	if req.ClientToken != nil {
		if id, ok := s.runToks[*req.ClientToken]; ok {
			writeJSON(w, http.StatusOK, cp.RunMicrovmResponse(s.vmReply(s.vms[id])))
			return
		}
	}
	im := s.resolveImage(w, "RunMicrovm", req.ImageIdentifier)
	if im == nil {
		return
	}
	var v *version
	if req.ImageVersion != nil {
		v = im.version(*req.ImageVersion)
	} else if im.active != "" {
		v = im.version(im.active)
	}
	if v == nil || v.status != cp.ACTIVE || v.state != cp.MicrovmImageVersionStateSUCCESSFUL {
		msg := "No active version found for MicroVM image " + im.arn
		if req.ImageVersion != nil {
			msg += " and version " + *req.ImageVersion
		}
		writeError(w, http.StatusNotFound, "ResourceNotFoundException", ptr(msg))
		return
	}
	// The policy is made before the MicroVM exists, so its guest starts
	// under it or not at all.
	vnet, launchNet, ok := s.claimLaunchNetwork(w, r)
	if !ok {
		return
	}
	id := s.nextID("microvm-")
	vm := &microvm{net: vnet,
		id: id, imageArn: im.arn, version: v.id, req: req, state: cp.MicrovmStatePENDING, startedAt: s.now(),
		started: s.opt.Now(), lastInbound: s.opt.Now(),
		endpoint: strings.TrimPrefix(id, "microvm-") + ".lambda-microvm." + s.opt.Region + ".on.aws",
		plan:     s.opt.Launches(im.arn),
	}
	if s.opt.VMs != nil {
		if err := s.startGuest(vm, v, req.RunHookPayload); err != nil {
			writeError(w, http.StatusInternalServerError, "InternalServerException", ptr("emulator: opening the MicroVM endpoint: "+err.Error()))
			return
		}
	}
	vm.req.RunHookPayload, vm.req.ClientToken = nil, nil // never readable back
	s.vms[id] = vm
	s.vmOrder = append(s.vmOrder, id)
	if req.ClientToken != nil {
		s.runToks[*req.ClientToken] = id
	}
	if launchNet != "" {
		delete(s.launchNets, launchNet)
	}
	writeJSON(w, http.StatusOK, cp.RunMicrovmResponse(s.vmReply(vm)))
}

func (s *Server) GetMicrovm(w http.ResponseWriter, r *http.Request, microvmIdentifier string) {
	vm := s.findVM(w, microvmIdentifier)
	if vm == nil {
		return
	}
	s.awaitLaunch(r.Context(), vm)
	s.observeVM(vm)
	writeJSON(w, http.StatusOK, s.vmReply(vm))
}

func (s *Server) ListMicrovms(w http.ResponseWriter, r *http.Request, params cp.ListMicrovmsParams) {
	ids := slices.DeleteFunc(slices.Clone(s.vmOrder), func(id string) bool {
		vm := s.vms[id]
		s.expire(vm)
		if params.ImageIdentifier != nil && *params.ImageIdentifier != vm.imageArn {
			return true
		}
		return params.ImageVersion != nil && *params.ImageVersion != vm.version
	})
	page, next, ok := paginate(w, ids, params.MaxResults, params.NextToken)
	if !ok {
		return
	}
	out := cp.ListMicrovmsResponse{Items: []cp.MicrovmItem{}, NextToken: next}
	for _, id := range page {
		vm := s.vms[id]
		out.Items = append(out.Items, cp.MicrovmItem{ImageArn: vm.imageArn, ImageVersion: vm.version, MicrovmId: vm.id, StartedAt: vm.startedAt, State: vm.state})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) conflict(w http.ResponseWriter, vm *microvm, action string) {
	writeError(w, http.StatusConflict, "ConflictException", ptr(fmt.Sprintf("Cannot %s MicroVM %s in state %s", action, vm.id, vm.state)))
}

// SuspendMicrovm and ResumeMicrovm are idempotent, as the model marks them:
// a suspend of a SUSPENDING or SUSPENDED MicroVM, and a resume of a RUNNING
// one or one whose resume is under way (PENDING after a resume), answer 200
// and change nothing; each other state answers 409 ConflictException.
func (s *Server) SuspendMicrovm(w http.ResponseWriter, r *http.Request, microvmIdentifier string) {
	vm := s.findVM(w, microvmIdentifier)
	if vm == nil {
		return
	}
	s.expire(vm)
	switch vm.state {
	case cp.MicrovmStateRUNNING:
		vm.state, vm.suspendedAt = cp.MicrovmStateSUSPENDING, s.opt.Now()
		vm.freeze()
		if s.opt.WallClock {
			vm.state = cp.MicrovmStateSUSPENDED
		}
	case cp.MicrovmStateSUSPENDING, cp.MicrovmStateSUSPENDED:
	default:
		s.conflict(w, vm, "suspend")
		return
	}
	writeJSON(w, http.StatusOK, cp.SuspendMicrovmResponse{})
}

func (s *Server) ResumeMicrovm(w http.ResponseWriter, r *http.Request, microvmIdentifier string) {
	vm := s.findVM(w, microvmIdentifier)
	if vm == nil {
		return
	}
	s.expire(vm)
	switch vm.state {
	case cp.MicrovmStateSUSPENDED:
		vm.state, vm.seen, vm.resumed, vm.reason, vm.lastInbound = cp.MicrovmStatePENDING, 0, true, nil, s.opt.Now()
		vm.thaw()
		if s.opt.WallClock {
			vm.state = cp.MicrovmStateRUNNING
		}
	case cp.MicrovmStateRUNNING:
	case cp.MicrovmStatePENDING:
		if !vm.resumed {
			// A launch still booting was never suspended.
			s.conflict(w, vm, "resume")
			return
		}
	default:
		s.conflict(w, vm, "resume")
		return
	}
	writeJSON(w, http.StatusOK, cp.ResumeMicrovmResponse{})
}

func (s *Server) TerminateMicrovm(w http.ResponseWriter, r *http.Request, microvmIdentifier string) {
	var gone *Guest
	defer func() {
		// Killed after the lock is released (deferred calls run in
		// reverse): stopping waits for the process to be reaped.
		if gone != nil {
			gone.Release()
		}
	}()
	vm := s.findVM(w, microvmIdentifier)
	if vm == nil {
		return
	}
	s.expire(vm)
	if vm.state != cp.MicrovmStateTERMINATED {
		vm.state = cp.MicrovmStateTERMINATING
		gone = vm.detachGuest()
		if s.opt.WallClock {
			now := s.now()
			vm.state, vm.terminatedAt = cp.MicrovmStateTERMINATED, &now
		}
	}
	writeJSON(w, http.StatusOK, cp.TerminateMicrovmResponse{})
}

// validPorts checks allowedPorts: each entry is a single-key union.
func validPorts(ports []cp.PortSpecification) string {
	if len(ports) == 0 {
		return "allowedPorts: Member must have length greater than or equal to 1"
	}
	for _, p := range ports {
		n := 0
		if p.Port != nil {
			n++
			if *p.Port < 1 || *p.Port > 65535 {
				return "allowedPorts.port: Member must have value between 1 and 65535"
			}
		}
		if p.Range != nil {
			n++
			if p.Range.StartPort < 1 || p.Range.EndPort > 65535 || p.Range.StartPort > p.Range.EndPort {
				return "allowedPorts.range: startPort and endPort must be ports with startPort <= endPort"
			}
		}
		if p.AllPorts != nil {
			n++
		}
		if n != 1 {
			return "allowedPorts: each PortSpecification must set exactly one member"
		}
	}
	return ""
}

func (s *Server) mint(vm *microvm) map[string]string {
	s.seq++
	// Random as well as named: the endpoint proxy accepts it, so it must
	// not be guessable from the MicroVM id.
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	tok := fmt.Sprintf("emulator-token-%s-%d-%x", vm.id, s.seq, secret)
	vm.tokens = append(vm.tokens, tok)
	return map[string]string{taxonomy.ProxyAuthHeader: tok}
}

func (s *Server) CreateMicrovmAuthToken(w http.ResponseWriter, r *http.Request, microvmIdentifier string) {
	var req cp.CreateMicrovmAuthTokenRequest
	if !decode(w, r, &req) {
		return
	}
	if req.ExpirationInMinutes < 1 || req.ExpirationInMinutes > taxonomy.MaxAuthTokenMinutes {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(fmt.Sprintf("expirationInMinutes must be between 1 and %d", taxonomy.MaxAuthTokenMinutes)))
		return
	}
	if msg := validPorts(req.AllowedPorts); msg != "" {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(msg))
		return
	}
	vm := s.findVM(w, microvmIdentifier)
	if vm == nil {
		return
	}
	s.expire(vm)
	if vm.state == cp.MicrovmStateTERMINATED || vm.state == cp.MicrovmStateTERMINATING {
		// Not 409: CreateMicrovmAuthToken lists no ConflictException, and
		// a client's decoder would see an unknown error. The platform's
		// answer here is unmeasured; a request for a VM that can no longer
		// be reached is invalid, so it is the listed 400.
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(fmt.Sprintf("Cannot create an auth token for MicroVM %s in state %s", vm.id, vm.state)))
		return
	}
	tok := s.mint(vm)
	if vm.grants == nil {
		vm.grants = map[string]grant{}
	}
	// The scope and expiry the endpoint proxy enforces; the emulator's
	// token is an opaque name for them, where the platform's is a JWE.
	vm.grants[tok[taxonomy.ProxyAuthHeader]] = grant{
		ports:   req.AllowedPorts,
		expires: s.opt.Now().Add(time.Duration(req.ExpirationInMinutes) * time.Minute),
	}
	writeJSON(w, http.StatusOK, cp.CreateMicrovmAuthTokenResponse{AuthToken: tok})
}

func (s *Server) CreateMicrovmShellAuthToken(w http.ResponseWriter, r *http.Request, microvmIdentifier string) {
	var req cp.CreateMicrovmShellAuthTokenRequest
	if !decode(w, r, &req) {
		return
	}
	vm := s.findVM(w, microvmIdentifier)
	if vm == nil {
		return
	}
	shell := false
	if vm.req.IngressNetworkConnectors != nil {
		for _, c := range *vm.req.IngressNetworkConnectors {
			shell = shell || strings.HasSuffix(c, ":SHELL_INGRESS")
		}
	}
	if !shell {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("Shell access requires SHELL_INGRESS network connector to be configured on the MicroVM."))
		return
	}
	if msg := shellConnectorsRefusal(*vm.req.IngressNetworkConnectors); msg != "" {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(msg))
		return
	}
	if req.ExpirationInMinutes < 1 || req.ExpirationInMinutes > taxonomy.MaxAuthTokenMinutes {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(fmt.Sprintf("expirationInMinutes must be between 1 and %d", taxonomy.MaxAuthTokenMinutes)))
		return
	}
	tok := s.mint(vm)
	if vm.grants == nil {
		vm.grants = map[string]grant{}
	}
	vm.grants[tok[taxonomy.ProxyAuthHeader]] = grant{shell: true, expires: s.opt.Now().Add(time.Duration(req.ExpirationInMinutes) * time.Minute)}
	writeJSON(w, http.StatusOK, cp.CreateMicrovmShellAuthTokenResponse{AuthToken: tok})
}

// LiveMicrovms lists the MicroVMs that are not TERMINATED (after applying
// any suspended window that has passed): what would still bill.
func (s *Server) LiveMicrovms() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var live []string
	for _, id := range s.vmOrder {
		vm := s.vms[id]
		s.expire(vm)
		if vm.state != cp.MicrovmStateTERMINATED {
			live = append(live, id+" "+string(vm.state))
		}
	}
	return live
}
