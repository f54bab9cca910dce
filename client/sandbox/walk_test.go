package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

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
	// The refusal cites the measured freeze and says to resume. Catches the
	// SUSPENDED test in runningSession negated (a suspended sandbox refused
	// with the generic "not RUNNING" text and no finding).
	if _, err := sb.ReadFile(ctx, "note"); client.KindOf(err) != taxonomy.KindInvalidArg || !hasFinding(err, taxonomy.FindingSuspendIsFreeze) || !strings.Contains(err.Error(), "Resume") {
		t.Fatalf("file read in a SUSPENDED VM: %v", err)
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
	// Attaching to it is refused with the platform's reason. Catches the
	// reason's non-empty test negated (the refusal would drop it).
	if _, err := Attach(ctx, f.cp, sb.ID(), sb.AgentToken(), Options{Wait: fast}); client.KindOf(err) != taxonomy.KindInvalidArg ||
		!strings.Contains(err.Error(), "TERMINATED (Run hook invocation timed out)") {
		t.Fatalf("attach to a VM that died launching: %v", err)
	}
	rep := sb.Terminate(ctx, TeardownOptions{})
	if !rep.Clean() || !rep.MicrovmTerminated {
		t.Fatalf("teardown of a dead VM: %+v", rep)
	}
}

// A launch whose wait ran out while the VM was still PENDING hands back its
// sandbox; its files and commands are refused as not yet RUNNING, with no
// finding: nothing about suspension applies. Catches the SUSPENDING test in
// runningSession negated (a PENDING sandbox would be told to Resume, citing
// the freeze finding).
func TestLaunchStillPendingRefusesWithoutASuspendFinding(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{Launches: func(string) emulator.LaunchPlan { return emulator.LaunchPlan{Steps: 1 << 30} }})
	arn := f.emu.AddImage("slow")
	sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: cplane.WaitOptions{Interval: time.Millisecond, Timeout: 50 * time.Millisecond}})
	if err == nil || sb == nil || sb.Lifecycle() != Pending {
		t.Fatalf("launch that never left PENDING: %v, %+v", err, sb)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	_, err = sb.ReadFile(ctx, "x")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindInvalidArg || ce.Finding() != "" || !strings.Contains(err.Error(), "is PENDING") {
		t.Fatalf("file read in a PENDING sandbox: %v", err)
	}
}

func hasFinding(err error, f taxonomy.FindingID) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Finding() == f
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

// The ledger's RunMicrovm step is settled by the launch: it names the
// MicroVM once the service answered, records a refused launch as failed,
// and a ledger that cannot be written is Launch's error (with the sandbox
// still handed back, so the VM that did start can be terminated).
// Catches, in Launch: the id taken only when RunMicrovm returned nothing
// (`run != nil` negated: the step keeps the image as its target, and a
// refused launch dereferences a nil answer), the refused launch going on to
// read the nil answer (`err != nil` negated before `run == nil`), and the
// ledger's error dropped (`lerr != nil` negated) or kept only when the
// launch failed too (`err == nil` negated).
func TestLaunchSettlesItsLedgerStep(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, emulator.Options{})
	arn := f.emu.AddImage("ledgered")
	runStep := func(rec *ledger.Record) ledger.Step {
		t.Helper()
		for _, s := range rec.Snapshot().Steps {
			if s.Op == "RunMicrovm" {
				return s
			}
		}
		t.Fatalf("no RunMicrovm step: %+v", rec.Snapshot().Steps)
		return ledger.Step{}
	}

	led, err := ledger.Open(t.TempDir(), f.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := led.Begin("us-east-1")
	sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: fast, Ledger: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	if s := runStep(rec); s.Target != sb.ID() || s.State != ledger.Done {
		t.Fatalf("RunMicrovm step after a launch: %+v, want target %s, done", s, sb.ID())
	}

	rec, _ = led.Begin("us-east-1")
	f.emu.Inject("RunMicrovm", emulator.FaultValidation)
	if sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: fast, Ledger: rec}); err == nil || sb != nil {
		t.Fatalf("a refused RunMicrovm: %+v, %v", sb, err)
	}
	if s := runStep(rec); s.State != ledger.Failed || s.Target != arn {
		t.Fatalf("RunMicrovm step after a refused launch: %+v", s)
	}

	// The ledger's directory disappears while a call is in flight (the
	// proxy below removes it on the request named by cut), so the step's
	// settling write fails.
	var mu sync.Mutex
	var cutDir, cutSuffix string
	cut := func(dir, suffix string) { mu.Lock(); cutDir, cutSuffix = dir, suffix; mu.Unlock() }
	u, _ := url.Parse(f.cpURL)
	px := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if cutSuffix != "" && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, cutSuffix) {
			os.RemoveAll(cutDir)
		}
		mu.Unlock()
		px.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cp, err := cplane.New(ctx, cplane.Options{Region: client.USEast1, Endpoint: srv.URL, Credentials: creds, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	openRecord := func(dir string) *ledger.Record {
		t.Helper()
		led, err := ledger.Open(dir, f.clock.Now)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := led.Begin("us-east-1")
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}

	dir := filepath.Join(t.TempDir(), "ledger")
	cut(dir, "/microvms")
	sb2, err := Launch(ctx, cp, Options{Image: arn, Wait: fast, Ledger: openRecord(dir)})
	if sb2 != nil {
		t.Cleanup(func() { sb2.Terminate(context.Background(), TeardownOptions{}) })
	}
	if err == nil || !strings.Contains(err.Error(), "ledger") || sb2 == nil || sb2.ID() == "" {
		t.Fatalf("a launch whose ledger write failed: %+v, %v", sb2, err)
	}

	// The same for a billable call after the launch (billable's `lerr != nil`
	// and `cerr == nil` negated: the ledger's error dropped).
	dir = filepath.Join(t.TempDir(), "ledger")
	cut("", "")
	sb3, err := Launch(ctx, cp, Options{Image: arn, Wait: fast, Ledger: openRecord(dir)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb3.Terminate(context.Background(), TeardownOptions{}) })
	cut(dir, "/suspend")
	if err := sb3.Suspend(ctx); err == nil || !strings.Contains(err.Error(), "ledger") {
		t.Fatalf("a suspend whose ledger write failed: %v", err)
	}
}

// The wait plan follows its documented defaults: Interval is the least
// delay (1 s unset), the greatest is at least 10 s, the budget is Timeout
// (10 minutes unset). Catches the 10 s floor of the greatest delay lost
// (`10*time.Second` as `10/time.Second`, which leaves it at Interval) and
// the unset test changed (`minDelay <= 0` as `< 0`, a zero delay kept, or
// negated, so a caller's Interval is replaced by 1 s).
func TestPlanWaitDefaults(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		o                          cplane.WaitOptions
		minDelay, maxDelay, budget time.Duration
	}{
		{cplane.WaitOptions{}, time.Second, 10 * time.Second, 10 * time.Minute},
		{cplane.WaitOptions{Interval: 5 * time.Millisecond, Timeout: time.Minute}, 5 * time.Millisecond, 10 * time.Second, time.Minute},
		{cplane.WaitOptions{Interval: 20 * time.Second}, 20 * time.Second, 20 * time.Second, 10 * time.Minute},
	} {
		p := planWait(ctx, c.o)
		if p.minDelay != c.minDelay || p.maxDelay != c.maxDelay || p.budget != c.budget {
			t.Errorf("%+v: plan %v/%v/%v, want %v/%v/%v", c.o, p.minDelay, p.maxDelay, p.budget, c.minDelay, c.maxDelay, c.budget)
		}
	}
}

// Resume against the suspended window and a failed ResumeMicrovm, with the
// emulator on the sandbox's clock (so it ends a VM past its window as the
// platform does). A resume at exactly the window is sent: only a window
// that has passed is refused locally. Past it, the refusal also records the
// VM as terminated, as GetMicrovm then says. A ResumeMicrovm refused while
// the VM is still SUSPENDED returns that refusal and leaves the model
// SUSPENDED. Catches: the window test made `since >= window` (a resume at
// the edge refused), and either half of isDead negated (a TERMINATED VM
// kept as SUSPENDED; a SUSPENDED one taken for dead, so a failed resume
// reads as WindowClosed and the model says terminated).
func TestResumeAtTheWindowsEdgeAndAfterAFailedCall(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	f := newFixture(t, emulator.Options{Now: clk.Now})
	arn := f.emu.AddImage("edges")
	launch := func() *Sandbox {
		t.Helper()
		sb, err := Launch(ctx, f.cp, Options{Image: arn, Wait: fast, Now: clk.Now,
			Idle: &cplane.IdlePolicy{MaxIdle: time.Minute, SuspendedFor: 2 * time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
		if err := sb.Suspend(ctx); err != nil {
			t.Fatal(err)
		}
		return sb
	}

	sb := launch()
	clk.Advance(2 * time.Minute)
	if err := sb.Resume(ctx); err != nil || sb.Lifecycle() != Running {
		t.Fatalf("resume at exactly the window: %v (%s)", err, sb.Lifecycle())
	}
	if err := sb.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2*time.Minute + time.Second)
	if err := sb.Resume(ctx); client.KindOf(err) != taxonomy.KindWindowClosed {
		t.Fatalf("resume past the window: %v", err)
	}
	if sb.Lifecycle() != Terminated || !sb.WasTerminated() {
		t.Fatalf("past the window the VM is gone, the model says %s (terminated %v)", sb.Lifecycle(), sb.WasTerminated())
	}

	sb = launch()
	f.emu.Inject("ResumeMicrovm", emulator.FaultValidation)
	err := sb.Resume(ctx)
	if err == nil || client.KindOf(err) == taxonomy.KindWindowClosed || sb.Lifecycle() != Suspended || sb.WasTerminated() {
		t.Fatalf("a refused resume of a SUSPENDED VM: %v, model %s (terminated %v)", err, sb.Lifecycle(), sb.WasTerminated())
	}
}

// Usage is read from the platform's times and the image's size, with the
// emulator and the sandbox on one clock so every figure is exact: 15
// minutes up less 3 suspended, and none for a VM ended the instant it
// started. Catches: the end taken from terminatedAt only when there is
// none (`TerminatedAt != nil` negated: a live VM's nil is read, a
// terminated one is timed to now), the frozen time added instead of taken
// off, a zero running time recorded as measured (`ran > 0` as `>=`), and
// the image's size class ignored (either half of sizeClass's empty-ARN test
// negated, so every VM reads as the default class).
func TestUsageReadsThePlatformsTimesAndSize(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	f := newFixture(t, emulator.Options{Now: clk.Now})
	want, err := client.SizeClassFromBaseline(4096)
	if err != nil || want == client.DefaultSizeClass() {
		t.Fatalf("size %v %v", want, err)
	}
	img, err := build.Build(ctx, f.cp, f.up, build.Spec{Daemon: agentdArm64(t), Workdir: "/w", Name: "sized", BuildRoleARN: role, Wait: fast, Size: want})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Launch(ctx, f.cp, Options{Image: img.ImageARN, Wait: fast, Now: clk.Now,
		Idle: &cplane.IdlePolicy{MaxIdle: time.Minute, SuspendedFor: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), TeardownOptions{}) })
	// A live VM has no terminatedAt; it is timed to the wall clock, which
	// this test does not pin, so only the size and the suspend figures are
	// checked here.
	u, size, err := sb.Usage(ctx)
	if err != nil || size != want || !u.Suspended.IsZero() || u.Cycles != 0 {
		t.Fatalf("usage at launch: %+v size %v, %v", u, size, err)
	}
	clk.Advance(10 * time.Minute)
	if err := sb.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Minute)
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if rep := sb.Terminate(ctx, TeardownOptions{}); !rep.MicrovmTerminated {
		t.Fatalf("terminate: %+v", rep)
	}
	clk.Advance(time.Hour) // after terminatedAt, nothing more is counted
	u, size, err = sb.Usage(ctx)
	if err != nil || size != want || u.Running.Time() != 12*time.Minute || u.Suspended.Time() != 3*time.Minute || u.Cycles != 1 {
		t.Fatalf("usage after the run: running %v suspended %v cycles %d size %v, %v", u.Running.Time(), u.Suspended.Time(), u.Cycles, size, err)
	}

	// Started and terminated at one instant: no running time at all.
	sb, err = Launch(ctx, f.cp, Options{Image: img.ImageARN, Wait: fast, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if rep := sb.Terminate(ctx, TeardownOptions{}); !rep.MicrovmTerminated {
		t.Fatalf("terminate: %+v", rep)
	}
	if u, _, err = sb.Usage(ctx); err != nil || !u.Running.IsZero() {
		t.Fatalf("a VM that never ran for any time: running %v (%v), %v", u.Running.Time(), u.Running.Provenance(), err)
	}
}
