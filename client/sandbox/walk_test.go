package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
)

// agentdHost is agentd for this machine: it plays the VM.
var agentdHost string

// agentdArm64 is agentd for the platform, the bytes that go into a build's
// artifact. Only the tests that build an image need it, so it is built on
// the first call rather than in TestMain: a run that stops before them (a
// mutant caught early under -failfast, a -run of other tests) skips the
// cross-compile.
func agentdArm64(t *testing.T) []byte {
	t.Helper()
	arm64Once.Do(func() {
		var path string
		if path, arm64Err = testbin.Build("cmd/agentd", testbin.Options{GOOS: "linux", GOARCH: "arm64"}); arm64Err == nil {
			arm64Bytes, arm64Err = os.ReadFile(path)
		}
	})
	if arm64Err != nil {
		t.Fatal(arm64Err)
	}
	return arm64Bytes
}

var (
	arm64Once  sync.Once
	arm64Bytes []byte
	arm64Err   error
)

func TestMain(m *testing.M) {
	var err error
	if agentdHost, err = testbin.Build("cmd/agentd", testbin.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The examples (package sandbox_test) start the embedded emulator with
	// no agentd path, as a library user does: it is found through
	// $MICROVM_AGENTD, the way `microvm run --local` finds it.
	os.Setenv("MICROVM_AGENTD", agentdHost)
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// vm is a real agentd process standing in for the MicroVM.
type vm struct{ addr string }

func startAgentd(t *testing.T) *vm {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(agentdHost)
	// A daemon dies with the test binary, even one a timeout or a mutation run kills:
	// an orphaned agentd once spun on a core for minutes after its test was gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = []string{"AGENTD_PORT=" + fmt.Sprint(port), "AGENTD_IDENTITY_REPAIR=0", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Dir = t.TempDir()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; i < 500; i++ { // bounded: about five seconds
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return &vm{addr: addr}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("agentd never listened")
	return nil
}

// toVM sends every endpoint request to the local agentd and records the
// proxy headers the session put on it.
type toVM struct {
	addr string
	mu   sync.Mutex
	auth []string
}

func (v *toVM) RoundTrip(r *http.Request) (*http.Response, error) {
	v.mu.Lock()
	v.auth = append(v.auth, r.Header.Get(taxonomy.ProxyAuthHeader))
	v.mu.Unlock()
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host, r2.Host = "http", v.addr, ""
	return http.DefaultTransport.RoundTrip(r2)
}

type fixture struct {
	emu    *emulator.Server
	cp     *lambdamicrovms.Client
	up     build.Uploader
	s3objs map[string][]byte
	clock  *fakeClock
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

var creds = credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")

func newFixture(t *testing.T, o emulator.Options) *fixture {
	t.Helper()
	emu := emulator.New(o)
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := cplane.New(context.Background(), cplane.Options{Region: client.USEast1, Endpoint: url, Credentials: creds, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{emu: emu, cp: c, s3objs: map[string][]byte{}, clock: &fakeClock{t: time.Unix(1_800_000_000, 0)}}
	// A loopback S3 that takes PutObject, so the upload goes through the real
	// transfer manager and SDK client.
	var mu sync.Mutex
	s3srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			http.Error(w, "only PutObject", http.StatusNotImplemented)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		f.s3objs[r.URL.Path] = b
		mu.Unlock()
		w.Header().Set("ETag", `"x"`)
	}))
	t.Cleanup(s3srv.Close)
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(s3srv.URL), UsePathStyle: true, Credentials: creds,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})
	f.up = &build.S3Uploader{Bucket: "artifacts", TM: transfermanager.New(s3c, func(o *transfermanager.Options) {
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	})}
	return f
}

const role = "arn:aws:iam::123456789012:role/build"

var fast = cplane.WaitOptions{Interval: time.Millisecond, Timeout: 10 * time.Second}

// TestFullWalk: build → launch → exec → suspend → resume → exec → terminate,
// against the emulated control plane with its VM backend: a real agentd per
// MicroVM, bootstrapped by the emulator's run hook before RUNNING, reached
// only through the emulator's token-checking endpoint proxy (so a request
// without a valid proxy token is a 403 that fails the walk), frozen by the
// suspend and killed by the terminate.
func TestFullWalk(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{VMs: emulator.AgentdLauncher(agentdHost, nil)})
	led, _ := ledger.Open(t.TempDir(), f.clock.Now)
	rec, err := led.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	var sent []int64
	img, err := build.Build(ctx, f.cp, f.up, build.Spec{
		Daemon: agentdArm64(t), Workdir: "/workspace", Name: "walk", Reuse: true, BuildRoleARN: role,
		Wait: fast, Ledger: rec, Progress: func(p build.Progress) {
			if p.Stage == "upload" {
				sent = append(sent, p.Sent)
			}
		},
	})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if len(sent) == 0 || sent[len(sent)-1] == 0 {
		t.Fatalf("no upload progress reported: %v", sent)
	}
	if len(f.s3objs) != 1 {
		t.Fatalf("uploaded %d objects", len(f.s3objs))
	}
	// The same inputs again reuse the image: no second create, no upload.
	again, err := build.Build(ctx, f.cp, f.up, build.Spec{Daemon: agentdArm64(t), Workdir: "/workspace", Name: "walk", Reuse: true, BuildRoleARN: role, Wait: fast})
	if err != nil || !again.Reused || again.Name != img.Name || len(f.s3objs) != 1 {
		t.Fatalf("reuse: %+v %v (objects %d)", again, err, len(f.s3objs))
	}

	sb, err := Launch(ctx, f.cp, Options{
		Image: img.ImageARN, ImageName: img.Name, LogGroup: img.LogGroup, ImageOwned: true,
		Env:  map[string]string{"GREETING": "hello"},
		Idle: &cplane.IdlePolicy{MaxIdle: 10 * time.Minute, SuspendedFor: 10 * time.Minute},
		Wait: fast, Now: f.clock.Now, Ledger: rec,
	})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	if sb.Lifecycle() != Running || !sb.TokenInstalled() || !sb.ImageExists() || sb.WasTerminated() || sb.BootstrapCount() != 1 {
		t.Fatalf("after launch: %s %v %v %v %d", sb.Lifecycle(), sb.TokenInstalled(), sb.ImageExists(), sb.WasTerminated(), sb.BootstrapCount())
	}
	if sb.SuspendedWindow() != 10*time.Minute {
		t.Fatalf("window %v not read from GetMicrovm's idlePolicy", sb.SuspendedWindow())
	}
	res, err := sb.Run(ctx, []string{"sh", "-c", "echo $GREETING > note; cat note"}, client.RunOptions{})
	if err != nil || strings.TrimSpace(res.Stdout) != "hello" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	mintsBefore := sb.Session().Mints()

	if err := sb.Suspend(ctx); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if sb.Lifecycle() != Suspended {
		t.Fatalf("after suspend: %s", sb.Lifecycle())
	}
	// Refusals in SUSPENDED, before any call.
	if err := sb.Suspend(ctx); client.KindOf(err) != taxonomy.KindInvalidArg {
		t.Fatalf("second suspend: %v", err)
	}
	if _, err := sb.Run(ctx, []string{"true"}, client.RunOptions{}); err == nil {
		t.Fatal("exec in a SUSPENDED VM was sent")
	}
	f.clock.Advance(5 * time.Minute) // inside the window
	if err := sb.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if sb.Lifecycle() != Running || sb.BootstrapCount() != 1 {
		t.Fatalf("after resume: %s installs=%d", sb.Lifecycle(), sb.BootstrapCount())
	}
	res, err = sb.Run(ctx, []string{"cat", "note"}, client.RunOptions{})
	if err != nil || strings.TrimSpace(res.Stdout) != "hello" {
		t.Fatalf("exec after resume: %+v %v", res, err)
	}
	// Resume dropped the cached proxy token: the next request minted anew.
	// Catches a wrong edit that forgets Session.Invalidate after resume.
	if sb.Session().Mints() <= mintsBefore {
		t.Fatalf("no re-mint after resume (%d then %d)", mintsBefore, sb.Session().Mints())
	}

	rep := sb.Terminate(ctx, TeardownOptions{DeleteImage: true, DeleteLogGroup: true})
	// No log client was given, so the group is named as leaked — never silent.
	if !rep.MicrovmTerminated || rep.ImageDeleted != ImageDeleted || rep.LogGroupDeleted || len(rep.Leaked) != 1 || rep.Leaked[0].ID != img.LogGroup {
		t.Fatalf("teardown: %+v", rep)
	}
	if sb.Lifecycle() != Terminated || !sb.WasTerminated() {
		t.Fatalf("after terminate: %s", sb.Lifecycle())
	}
	if err := sb.Resume(ctx); err == nil {
		t.Fatal("resumed a TERMINATED VM")
	}

	// The payload went out once; no other request and no ledger byte holds it.
	var payload string
	runs := 0
	for _, r := range f.emu.Requests() {
		if strings.HasSuffix(r.Path, "/microvms") && r.Method == http.MethodPost {
			var body struct{ RunHookPayload string }
			json.Unmarshal(r.Body, &body)
			payload = body.RunHookPayload
			runs++
		}
	}
	var tok struct {
		AgentToken string `json:"agent_token"`
	}
	if err := json.Unmarshal([]byte(payload), &tok); err != nil || len(tok.AgentToken) < 32 {
		t.Fatalf("payload has no agent token: %v", err)
	}
	if runs != 1 {
		t.Fatalf("%d RunMicrovm requests", runs)
	}
	for _, r := range f.emu.Requests() {
		if !(strings.HasSuffix(r.Path, "/microvms") && r.Method == http.MethodPost) && bytes.Contains(r.Body, []byte(tok.AgentToken)) {
			t.Fatalf("%s %s re-delivered the agent token", r.Method, r.Path)
		}
	}
	ledgerBytes, _ := os.ReadFile(rec.Path())
	if bytes.Contains(ledgerBytes, []byte(tok.AgentToken)) {
		t.Fatal("the ledger holds the agent token")
	}
	run := rec.Snapshot()
	if run.MicrovmID != sb.ID() || run.Image != img.Name || len(run.Leaked) != 1 || run.Closed {
		t.Fatalf("ledger: %+v", run)
	}
	for _, s := range run.Steps {
		if s.State == ledger.Started {
			t.Fatalf("ledger step %s left started", s.Op)
		}
	}
}

// TestDeadLaunch: a VM that dies before RUNNING fails the launch as
// LaunchDied with the reason, leaves a Sandbox to tear down, and the model
// records it as terminated. Catches a wrong edit that polls on through the
// terminal state or returns a nil Sandbox (leaking the id).
func TestDeadLaunch(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{Launches: func(string) emulator.LaunchPlan {
		return emulator.LaunchPlan{DieReason: "Run hook invocation timed out"}
	}})
	arn := f.emu.AddImage("dead")
	sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: fast})
	if client.KindOf(err) != taxonomy.KindLaunchDied || !strings.Contains(err.Error(), "Run hook invocation timed out") {
		t.Fatalf("want LaunchDied with the reason, got %v", err)
	}
	if sb == nil || sb.ID() == "" || sb.Lifecycle() != Terminated || !sb.WasTerminated() || sb.TokenInstalled() {
		t.Fatalf("dead sandbox: %+v", sb)
	}
	rep := sb.Terminate(ctx, TeardownOptions{})
	if !rep.Clean() || !rep.MicrovmTerminated {
		t.Fatalf("teardown of a dead VM: %+v", rep)
	}
}

// TestWedgedBuild: a build whose every build stays PENDING fails as
// BuildWedged naming the clientToken finding, and Build still returns the
// image so it can be cleaned up. Catches dropping the Result on a wait error.
func TestWedgedBuild(t *testing.T) {
	f := newFixture(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Wedge: true} }})
	w := fast
	w.Grace = time.Nanosecond
	res, err := build.Build(context.Background(), f.cp, f.up, build.Spec{Daemon: agentdArm64(t), Workdir: "/w", Name: "wedge", BuildRoleARN: role, Wait: w})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindBuildWedged || ce.Finding() != taxonomy.FindingClientTokenPermanent {
		t.Fatalf("want BuildWedged, got %v", err)
	}
	if res == nil || res.ImageARN == "" || res.LogGroup != "/aws/lambda-microvms/wedge" {
		t.Fatalf("no image to clean up: %+v", res)
	}
}

// TestWindowClosed: a resume past the suspended window is refused as
// WindowClosed naming idle-policy and the window, with no ResumeMicrovm sent.
// Catches a wrong edit that reads the window from the request instead of
// GetMicrovm, or that sends the resume and reports whatever comes back.
func TestWindowClosed(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{})
	v := startAgentd(t)
	arn := f.emu.AddImage("window")
	sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: fast, Now: f.clock.Now,
		Idle:           &cplane.IdlePolicy{MaxIdle: time.Minute, SuspendedFor: 2 * time.Minute},
		SessionOptions: []client.Option{client.WithHTTPClient(&http.Client{Transport: &toVM{addr: v.addr}})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2*time.Minute + time.Second)
	err = sb.Resume(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindWindowClosed || ce.Finding() != taxonomy.FindingIdlePolicy || !strings.Contains(err.Error(), "suspendedDurationSeconds=120") {
		t.Fatalf("want WindowClosed naming the window, got %v", err)
	}
	for _, r := range f.emu.Requests() {
		if strings.HasSuffix(r.Path, "/resume") {
			t.Fatal("a resume was sent past the window")
		}
	}
	sb.Terminate(ctx, TeardownOptions{})
}

// TestLeakPath: deletes that fail show up in the report by identifier, never
// as an error, and the ledger stays open. The log group goes through the real
// CloudWatch Logs client to a loopback server that fails it; the image delete
// fails with an injected 400. Catches a wrong edit that returns on the first
// failure (the later resources would go unnamed) or counts a failure as done.
func TestLeakPath(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{})
	v := startAgentd(t)
	img, err := build.Build(ctx, f.cp, f.up, build.Spec{Daemon: agentdArm64(t), Workdir: "/w", Name: "leaky", BuildRoleARN: role, Wait: fast})
	if err != nil {
		t.Fatal(err)
	}
	cw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"__type":"AccessDeniedException","message":"not allowed"}`)
	}))
	defer cw.Close()
	logs := cloudwatchlogs.New(cloudwatchlogs.Options{Region: "us-east-1", BaseEndpoint: aws.String(cw.URL), Credentials: creds, RetryMaxAttempts: 1})
	led, _ := ledger.Open(t.TempDir(), f.clock.Now)
	rec, _ := led.Begin("us-east-1")
	sb, err := Launch(ctx, f.cp, Options{Image: img.ImageARN, ImageOwned: true, LogGroup: img.LogGroup, Logs: logs, Wait: fast, Ledger: rec,
		SessionOptions: []client.Option{client.WithHTTPClient(&http.Client{Transport: &toVM{addr: v.addr}})}})
	if err != nil {
		t.Fatal(err)
	}
	f.emu.Inject("DeleteMicrovmImage", emulator.FaultValidation)
	rep := sb.Terminate(ctx, TeardownOptions{DeleteImage: true, DeleteLogGroup: true})
	if !rep.MicrovmTerminated || rep.ImageDeleted != ImageFailed || rep.LogGroupDeleted {
		t.Fatalf("report: %+v", rep)
	}
	ids := map[string]bool{}
	for _, l := range rep.Leaked {
		ids[l.Kind+" "+l.ID] = true
	}
	if !ids["image "+img.ImageARN] || !ids["log_group "+img.LogGroup] || len(ids) != 2 {
		t.Fatalf("leaks not named: %+v", rep.Leaked)
	}
	open, _ := led.Open()
	if len(open) != 1 || len(open[0].Leaked) != 2 {
		t.Fatalf("the ledger forgot the leak: %+v", open)
	}
}

// TestTerminateAfterInterrupt: teardown with an already-cancelled context
// (what an interrupted caller has) still terminates the VM. Catches Terminate
// inheriting the caller's cancellation, which reports every resource as
// leaked without sending a single delete.
func TestTerminateAfterInterrupt(t *testing.T) {
	f := newFixture(t, emulator.Options{})
	arn := f.emu.AddImage("interrupted")
	sb, err := Launch(context.Background(), f.cp, Options{Image: arn, Wait: fast})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep := sb.Terminate(ctx, TeardownOptions{})
	if !rep.MicrovmTerminated || len(rep.Leaked) != 0 {
		t.Fatalf("teardown after an interrupt: %+v", rep)
	}
}
