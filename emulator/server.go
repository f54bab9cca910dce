package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/microvms/microvms/emulator/iam"
	"github.com/microvms/microvms/imagebuild"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Options configure a Server. The zero value is a working us-east-1 account.
type Options struct {
	// Account is the 12-digit account id that appears in ARNs.
	Account string
	// Region is the region ARNs and endpoints are minted for. The region a
	// request is signed for is checked separately, against the supported set.
	Region string
	// Now stamps createdAt and friends, and is the clock proxy tokens
	// expire by; nothing waits on it.
	Now func() time.Time
	// Builds decides how the builds of a new image version behave.
	Builds func(imageName string) BuildPlan
	// Launches decides how a new MicroVM's launch behaves.
	Launches func(imageArn string) LaunchPlan
	// VMs, when set, makes each MicroVM a real guest: RunMicrovm starts it
	// through this launcher, delivers the run hook before the MicroVM can
	// report RUNNING, and serves its endpoint (a bare 127.0.0.1:PORT host)
	// through a proxy that checks X-aws-proxy-auth and X-aws-proxy-port.
	// AgentdLauncher runs a real agentd. Call Close to stop the guests.
	VMs Launcher
	// WallClock makes the lifecycle move with time instead of with reads: a
	// build finishes at its first observation, a launch is RUNNING as soon
	// as its run hook answered 200, a suspend or terminate completes as soon
	// as the guest is frozen or stopped. BuildPlan.Steps and LaunchPlan.Steps
	// are ignored. This is the mode for people; tests keep the default,
	// where each read is one step.
	WallClock bool
	// IdleUnit is how long one second of an idlePolicy's durations and of
	// maximumDurationInSeconds lasts; zero is a second. For tests only: it
	// shortens the idle policy's real windows (60 seconds at the platform's
	// minimum) while the API keeps refusing what the platform refuses. The
	// WallClock mode's sweep, which freezes idle guests when they are due,
	// ticks at most this often.
	IdleUnit time.Duration
	// StateDir is where the emulator keeps what it unpacks from file://
	// code artifacts (the daemon an image's guests run). Empty, a temporary
	// directory is made when first needed and removed by Close.
	StateDir string
	// BaseImage, when set, is the OCI image layout directory or `docker
	// save` tarball every local build's FROM resolves to; empty pulls
	// FROM from its registry (docs/PLATFORM.md, "A managed base image
	// builds from one docker reference").
	BaseImage string
	// PullBase lets a local build without BaseImage pull its FROM from
	// the registry (with the user's Docker credentials). Without either,
	// guests run on the host's system directories and the build log names
	// the steps not performed.
	PullBase bool
	// BuildCache is where local builds keep base images and step
	// snapshots; empty is StateDir's build-cache.
	BuildCache string
	// BuildProgress, if set, sees every step of every local Dockerfile
	// build, as it happens.
	BuildProgress func(image string, e BuildEvent)
	// Build runs a local build's Dockerfile: the seam to the image builder.
	// Nil is imagebuild.BuildDockerfile, which runs each RUN in a guest of
	// the local runtime.
	Build func(ctx context.Context, b imagebuild.DockerBuild) (*imagebuild.BuiltImage, error)
	// Warn, if set, is told once per MicroVM whose guest runs without some
	// of its resource limits (a rootless emulator on a host that does not
	// delegate cgroups to it), in words a user can act on.
	Warn func(msg string)
	// Network is where the allowed connections of a guest launched under
	// a network policy go (issue 48, network.go); the zero value is the
	// host's own resolver, dialer and trust store.
	Network NetworkOptions
	// Trace, if set, is told when a MicroVM's launch passes each of its
	// phases (TracePhase), for a benchmark's breakdown of where the time
	// to RUNNING goes. It may be called with the emulator's lock held, so
	// it must be quick and must not call the Server.
	Trace func(microvmID string, phase TracePhase)
}

// TracePhase names one point a launch passes, in order.
type TracePhase string

// The phases of a launch, as Options.Trace reports them.
const (
	// TraceAccepted: RunMicrovm accepted the launch (before its answer).
	TraceAccepted TracePhase = "accepted"
	// TraceGuestListening: the launcher's guest is up and agentd accepts
	// connections on the hook port.
	TraceGuestListening TracePhase = "guest-listening"
	// TraceRunHook: the run hook answered.
	TraceRunHook TracePhase = "run-hook"
	// TraceRunning: the MicroVM reads RUNNING.
	TraceRunning TracePhase = "running"
)

// trace reports phase of id to Options.Trace, if set.
func (s *Server) trace(id string, phase TracePhase) {
	if s.opt.Trace != nil {
		s.opt.Trace(id, phase)
	}
}

// BuildPlan is how one image version's builds progress. Each read of the
// image, its versions or its builds is one observation.
type BuildPlan struct {
	// Steps is how many observations the builds spend IN_PROGRESS (0 means 1).
	Steps int
	// FailReason, when set, fails every build with this stateReason; the
	// version is FAILED with no reason, as measured.
	FailReason string
	// Wedge keeps every build PENDING forever, the state a replayed
	// clientToken produces.
	Wedge bool
}

// LaunchPlan is how one MicroVM's launch progresses. Each GetMicrovm is one
// observation.
type LaunchPlan struct {
	// Steps is how many observations the VM spends PENDING (0 means 1).
	Steps int
	// DieReason, when set, sends the VM to TERMINATED before RUNNING with
	// this stateReason, as a failed run hook does.
	DieReason string
}

// Fault is a canned failure injected ahead of an operation's real answer.
type Fault int

// The faults a test can queue with Inject.
const (
	// FaultThrottle answers 429 ThrottlingException with Retry-After: 0.
	FaultThrottle Fault = iota + 1
	// FaultInternal answers 500 InternalServerException.
	FaultInternal
	// FaultGatewayHTML answers 502 with an HTML page, as the gateway in front
	// of the service does.
	FaultGatewayHTML
	// FaultAccessDeniedNull answers 403 AccessDeniedException with a null
	// message.
	FaultAccessDeniedNull
	// FaultValidation answers 400 ValidationException, which is never retried.
	FaultValidation
)

// Request is one request as the emulator received it.
type Request struct {
	Method   string
	Host     string
	Path     string // escaped, exactly as sent
	RawQuery string
	Header   http.Header
	Body     []byte // nil for S3, whose bodies are objects
	// Service is the service the SigV4 credential scope names ("lambda",
	// "s3", "logs", "sts"), "" for an unsigned request.
	Service string
	// Local is the listener address the request arrived at.
	Local string
}

// Server is the emulated control plane. Its zero value is not usable; call New.
type Server struct {
	opt     Options
	handler http.Handler

	mu      sync.Mutex
	seq     int
	images  map[string]*image // by name
	vms     map[string]*microvm
	vmOrder []string
	tokens  map[string]string // clientToken -> image name, never forgotten
	runToks map[string]string // RunMicrovm clientToken -> microvm id
	// launchNets are network policies registered for launches not yet
	// sent, by launch id (network.go); a RunMicrovm claims one.
	launchNets map[string]cliapi.NetworkLaunch
	faults     map[string][]Fault
	requests   []Request
	// Each service slice keeps its own store, as LocalStack's providers
	// do; s.mu guards them all, since a build reads the S3 slice's
	// objects and writes the Logs slice's events under it.
	cwl      logsStore    // the CloudWatch Logs slice (logs.go)
	s3       s3Store      // the S3 slice (s3.go)
	iam      *iam.Service // the IAM slice (package emulator/iam); STS keeps no state
	reqIDs   atomic.Int64 // request ids of S3 and STS answers
	stateDir string       // resolved Options.StateDir
	tmpState bool         // stateDir was made here and goes at Close

	// The VM backend's resources: launches run under ctx, and Close waits
	// for them and closes every endpoint proxy.
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	proxies []*http.Server
}

// New builds a Server.
func New(opt Options) *Server {
	if opt.Account == "" {
		opt.Account = "123456789012"
	}
	if opt.Region == "" {
		opt.Region = "us-east-1"
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Builds == nil {
		opt.Builds = func(string) BuildPlan { return BuildPlan{} }
	}
	if opt.Launches == nil {
		opt.Launches = func(string) LaunchPlan { return LaunchPlan{} }
	}
	if opt.Build == nil {
		opt.Build = imagebuild.BuildDockerfile
	}
	s := &Server{
		opt:        opt,
		images:     map[string]*image{},
		vms:        map[string]*microvm{},
		tokens:     map[string]string{},
		runToks:    map[string]string{},
		launchNets: map[string]cliapi.NetworkLaunch{},
		faults:     map[string][]Fault{},
	}
	s.iam = &iam.Service{Account: opt.Account, Now: opt.Now, RequestID: s.stsRequestID, Fault: s.fault}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if opt.WallClock {
		// By the clock, an idle guest is frozen when it is due, not when
		// the control plane is next asked about it.
		s.wg.Add(1)
		go s.sweep()
	}
	api := controlplane.HandlerWithOptions(s, controlplane.StdHTTPServerOptions{
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadRequest, errorName(w, http.StatusBadRequest, "ValidationException"), ptr(err.Error()))
		},
	})
	s.handler = s.networkRoutes(s.gate(s.wire(api)))
	return s
}

// Handler is the HTTP handler serving the control plane.
func (s *Server) Handler() http.Handler { return s.handler }

// ServeLoopback serves on a fresh 127.0.0.1 port and returns its base URL and
// a function that stops the server and, through Close, its guests.
func (s *Server) ServeLoopback() (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close(); s.Close() }, nil
}

// ServeOn serves on addr, which must be a loopback address (port 0 picks a
// free one), and returns its base URL and a function that stops the server
// and, through Close, its guests.
func (s *Server) ServeOn(addr string) (url string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("the emulator listens on loopback only, not %s", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close(); s.Close() }, nil
}

// Inject queues faults for operation (its operationId, e.g. "GetMicrovm");
// each request to it consumes one before any real handling.
func (s *Server) Inject(operation string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[operation] = append(s.faults[operation], faults...)
}

// Requests returns every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// The SigV4 signing names of the services the emulator answers on its one
// listener: the control plane signs as "lambda" (the model's sigv4 name),
// and the slices of S3, CloudWatch Logs and STS the CLI needs beside it.
const (
	serviceMicrovms = "lambda"
	serviceS3       = "s3"
	serviceLogs     = "logs"
	serviceSTS      = "sts"
)

// maxControlBody bounds a control-plane, CloudWatch Logs or STS body; an S3
// body is bounded by maxObjectBytes and never kept in Requests.
const maxControlBody = 8 << 20

// gate records each request and routes it by the service its SigV4
// credential scope names, as AWS's endpoints are told apart by host: each
// service answers in its own wire protocol and error shape. A control-plane
// request is then checked as the service checks it before routing: a region
// that carries MicroVMs, and cursors whose '=' padding is percent-encoded.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		region, service, ok := credentialScope(r.Header.Get("Authorization"))
		if !ok {
			// A presigned S3 URL carries its scope in the query.
			region, service, ok = credentialScope("AWS4-HMAC-SHA256 Credential=" + r.URL.Query().Get("X-Amz-Credential"))
		}
		rec := Request{Method: r.Method, Host: r.Host, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Service: service}
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			rec.Local = la.String()
		}
		if ok && service == serviceS3 {
			s.mu.Lock()
			s.requests = append(s.requests, rec)
			s.mu.Unlock()
			s.serveS3(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody))
		if err != nil {
			writeError(w, http.StatusBadRequest, "ValidationException", ptr("unreadable body"))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec.Body = body
		s.mu.Lock()
		s.requests = append(s.requests, rec)
		s.mu.Unlock()

		switch {
		case ok && service == serviceLogs:
			s.serveLogs(w, r, body)
			return
		case ok && service == serviceSTS:
			s.serveSTS(w, r, body)
			return
		case ok && service == iam.SigningName:
			s.iam.Serve(w, r, body)
			return
		case strings.HasPrefix(r.Header.Get("X-Amz-Target"), logsTargetPrefix):
			// A CloudWatch Logs call signed for another service (or not at
			// all) is answered in CloudWatch Logs' words.
			writeLogsError(w, http.StatusBadRequest, "IncompleteSignatureException", "Credential should be scoped to correct service: 'logs'.")
			return
		case !ok:
			writeError(w, http.StatusForbidden, "IncompleteSignatureException", ptr("Authorization header requires a SigV4 Credential"))
			return
		case service != serviceMicrovms:
			writeError(w, http.StatusForbidden, "InvalidSignatureException", ptr(fmt.Sprintf("Credential should be scoped to correct service: 'lambda'. This endpoint also serves 's3', 'logs', 'sts' and 'iam'; %q is none of them.", service)))
			return
		case !slices.Contains(taxonomy.Regions, region):
			// A region without MicroVMs: the measured answer names nothing.
			writeError(w, http.StatusForbidden, "AccessDeniedException", nil)
			return
		}
		for _, part := range strings.Split(r.URL.RawQuery, "&") {
			if k, v, _ := strings.Cut(part, "="); k == "nextToken" && strings.Contains(v, "=") {
				// An unencoded '=' in a cursor is a request the service
				// cannot parse, and it says nothing about why.
				writeError(w, http.StatusBadRequest, "ValidationException", nil)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// credentialScope reads region and service from a SigV4 Authorization header.
func credentialScope(auth string) (region, service string, ok bool) {
	_, rest, found := strings.Cut(auth, "Credential=")
	if !found || !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") {
		return "", "", false
	}
	cred, _, _ := strings.Cut(rest, ",")
	parts := strings.Split(cred, "/")
	if len(parts) != 5 || parts[4] != "aws4_request" {
		return "", "", false
	}
	return parts[2], parts[3], true
}

// fault answers with the next queued fault for operation, if any.
func (s *Server) fault(w http.ResponseWriter, operation string) bool {
	s.mu.Lock()
	q := s.faults[operation]
	if len(q) == 0 {
		s.mu.Unlock()
		return false
	}
	f := q[0]
	s.faults[operation] = q[1:]
	s.mu.Unlock()
	markInjected(w)
	switch f {
	case FaultThrottle:
		w.Header().Set("Retry-After", "0")
		writeError(w, http.StatusTooManyRequests, errorName(w, http.StatusTooManyRequests, "ThrottlingException"), ptr("Rate exceeded"))
	case FaultInternal:
		writeError(w, http.StatusInternalServerError, errorName(w, http.StatusInternalServerError, "InternalServerException"), ptr("Internal failure, please retry"))
	case FaultGatewayHTML:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n")
	case FaultAccessDeniedNull:
		writeError(w, http.StatusForbidden, "AccessDeniedException", nil)
	case FaultValidation:
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("injected validation failure"))
	}
	return true
}

// writeError writes a restJson1 error: the type in X-Amzn-ErrorType and a body
// whose message may be null, which the generated types cannot express.
func writeError(w http.ResponseWriter, status int, errType string, msg *string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", errType)
	w.WriteHeader(status)
	if msg == nil {
		_, _ = io.WriteString(w, `{"message":null}`)
		return
	}
	b, _ := json.Marshal(controlplane.ValidationException{Message: msg})
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerException", ptr(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// decode reads a JSON body strictly: a member the model does not declare (a
// union discriminator, a misspelt field) is refused as the service refuses it.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, errorName(w, http.StatusBadRequest, "ValidationException"), ptr("Could not parse request body: "+err.Error()))
		return false
	}
	return true
}

func notFound(w http.ResponseWriter, what, id string) {
	writeError(w, http.StatusNotFound, "ResourceNotFoundException", ptr(fmt.Sprintf("%s not found for %s", what, id)))
}

func ptr[T any](v T) *T { return &v }

func (s *Server) now() float64 {
	return float64(s.opt.Now().UnixMilli()) / 1000
}

// nextID returns an identifier unique within this server and, by its 48
// random bits, across servers and restarts: a counter alone repeated a
// fresh emulator's ids run after run, so a ledger or a kept record of an
// earlier emulator named a MicroVM of the next one. The counter still leads,
// so ids sort in the order they were made.
func (s *Server) nextID(prefix string) string {
	s.seq++
	var r [8]byte
	_, _ = rand.Read(r[2:])
	return fmt.Sprintf("%s%08x-0000-4000-8000-%012x", prefix, s.seq, binary.BigEndian.Uint64(r[:]))
}
