package control

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// buildImage creates an image and waits for it, returning its colon ARN.
func buildImage(t *testing.T, h *harness, name string) (ImageRef, string) {
	t.Helper()
	ctx := ctxT(t)
	created, err := h.c.CreateImage(ctx, testSpec(name))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := ParseImageRef(created.ImageArn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.WaitImage(ctx, ref, created.ImageVersion, fastWait); err != nil {
		t.Fatal(err)
	}
	return ref, created.ImageVersion
}

// Catches: deriving the clientToken from stable inputs only (dropping the
// random component). With a source that repeats, delete-then-recreate
// replays the old token, the builds are never scheduled, and WaitImage must
// call it BuildWedged naming the clientToken finding instead of waiting out
// the timeout.
func TestWedgeFromReplayedClientTokenFailsFast(t *testing.T) {
	h := newHarness(t, emulator.Options{}, func(o *Options) { o.Random = repeatReader{} })
	ctx := ctxT(t)
	ref, _ := buildImage(t, h, "wedge")
	if _, err := h.c.DeleteImage(ctx, ref); err != nil {
		t.Fatal(err)
	}
	again, err := h.c.CreateImage(ctx, testSpec("wedge"))
	if err != nil {
		t.Fatal(err)
	}
	var polls int
	o := fastWait
	o.Grace = 1 // past the grace period on the first poll
	o.Progress = func(Progress) { polls++ }
	_, err = h.c.WaitImage(ctx, ref, again.ImageVersion, o)
	requireKind(t, err, taxonomy.KindBuildWedged, taxonomy.FindingClientTokenPermanent)
	if polls != 1 {
		t.Fatalf("wedge detected after %d polls; it should fail on the first poll past the grace period", polls)
	}
}

// Catches: a grace check that fires on a healthy build (e.g. testing
// "no build SUCCESSFUL" instead of "every build PENDING").
func TestHealthyBuildIsNotCalledWedged(t *testing.T) {
	h := newHarness(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Steps: 3} }}, nil)
	ctx := ctxT(t)
	created, err := h.c.CreateImage(ctx, testSpec("healthy"))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := ParseImageRef(created.ImageArn)
	o := fastWait
	o.Grace = 1
	if _, err := h.c.WaitImage(ctx, ref, created.ImageVersion, o); err != nil {
		t.Fatal(err)
	}
}

// Catches: a clientToken that is the same for two attempts (a constant, a
// digest of the spec) or that the caller can set.
func TestEachBuildAttemptMintsItsOwnToken(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	for _, n := range []string{"a1", "a2"} {
		if _, err := h.c.CreateImage(ctx, testSpec(n)); err != nil {
			t.Fatal(err)
		}
	}
	var toks []string
	for _, r := range h.emu.Requests() {
		if r.Method == http.MethodPost {
			_, rest, _ := strings.Cut(string(r.Body), `"clientToken":"`)
			tok, _, _ := strings.Cut(rest, `"`)
			toks = append(toks, tok)
		}
	}
	if len(toks) != 2 || toks[0] == "" || toks[0] == toks[1] || len(toks[0]) > taxonomy.MaxClientTokenLen {
		t.Fatalf("tokens %q: want two distinct non-empty tokens of at most %d bytes", toks, taxonomy.MaxClientTokenLen)
	}
}

// Catches: reading the failure reason from the image or the version (both
// null) instead of from the builds, or reporting only one build.
func TestBuildFailureReasonComesFromEveryBuild(t *testing.T) {
	const reason = "The container image build failed."
	h := newHarness(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{FailReason: reason} }}, nil)
	ctx := ctxT(t)
	created, err := h.c.CreateImage(ctx, testSpec("broken"))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := ParseImageRef(created.ImageArn)
	_, err = h.c.WaitImage(ctx, ref, created.ImageVersion, fastWait)
	requireKind(t, err, taxonomy.KindPlatform, taxonomy.FindingBuildFailureOnBuild)
	var bf *BuildFailure
	if !errors.As(err, &bf) || len(bf.Builds) != 2 {
		t.Fatalf("want a BuildFailure with both chipset builds, got %v", err)
	}
	if strings.Count(err.Error(), reason) != 2 {
		t.Fatalf("the reason of each build should be reported: %v", err)
	}
}

// Catches: polling through a terminal state (the waiter would spin to its
// timeout) or dropping stateReason from the error.
func TestDeadLaunchFailsFastWithStateReason(t *testing.T) {
	const reason = "Run lifecycle hook returned HTTP status 400. Please check your hook endpoint and application logs for more details."
	h := newHarness(t, emulator.Options{Launches: func(string) emulator.LaunchPlan { return emulator.LaunchPlan{Steps: 2, DieReason: reason} }}, nil)
	ctx := ctxT(t)
	ref, _ := buildImage(t, h, "dies")
	vm, err := h.c.Launch(ctx, LaunchSpec{Image: ref, Connectors: Connectors{Ingress: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.c.WaitRunning(ctx, vm.MicrovmId, fastWait)
	ce := requireKind(t, err, taxonomy.KindLaunchDied, taxonomy.FindingDeadBeforeRunning)
	if !strings.Contains(ce.Message(), reason) {
		t.Fatalf("stateReason missing from %v", err)
	}
}

// Catches: a lifecycle waiter that waits for the wrong target state.
func TestLifecycleWaits(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	ref, _ := buildImage(t, h, "life")
	vm, err := h.c.Launch(ctx, LaunchSpec{Image: ref, Connectors: Connectors{Ingress: true}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		act  func() error
		wait func() (*cp.GetMicrovmResponse, error)
		want cp.MicrovmState
	}{
		{func() error { return nil }, func() (*cp.GetMicrovmResponse, error) { return h.c.WaitRunning(ctx, vm.MicrovmId, fastWait) }, cp.MicrovmStateRUNNING},
		{func() error { return h.c.Suspend(ctx, vm.MicrovmId) }, func() (*cp.GetMicrovmResponse, error) { return h.c.WaitSuspended(ctx, vm.MicrovmId, fastWait) }, cp.MicrovmStateSUSPENDED},
		{func() error { return h.c.Resume(ctx, vm.MicrovmId) }, func() (*cp.GetMicrovmResponse, error) { return h.c.WaitRunning(ctx, vm.MicrovmId, fastWait) }, cp.MicrovmStateRUNNING},
		{func() error { return h.c.Terminate(ctx, vm.MicrovmId) }, func() (*cp.GetMicrovmResponse, error) { return h.c.WaitTerminated(ctx, vm.MicrovmId, fastWait) }, cp.MicrovmStateTERMINATED},
	}
	for _, s := range steps {
		if err := s.act(); err != nil {
			t.Fatal(err)
		}
		got, err := s.wait()
		if err != nil {
			t.Fatal(err)
		}
		if got.State != s.want {
			t.Fatalf("state %s, want %s", got.State, s.want)
		}
	}
	if !strings.HasPrefix(EndpointURL(vm.Endpoint), "https://") || strings.Contains(vm.Endpoint, "://") {
		t.Fatalf("endpoint %q should be a bare host that EndpointURL completes", vm.Endpoint)
	}
}

// Catches: a waiter with no bound (a context without a deadline must still
// end at Timeout, as Timeout).
func TestWaitEndsAtItsTimeout(t *testing.T) {
	h := newHarness(t, emulator.Options{Launches: func(string) emulator.LaunchPlan { return emulator.LaunchPlan{Steps: 1 << 30} }}, nil)
	ctx := ctxT(t)
	ref, _ := buildImage(t, h, "slow")
	vm, err := h.c.Launch(ctx, LaunchSpec{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	o := fastWait
	o.Timeout = 50 * 1e6 // 50ms
	_, err = h.c.WaitRunning(t.Context(), vm.MicrovmId, o)
	requireKind(t, err, taxonomy.KindTimeout, "")
}

// Catches: forwarding a null-message 403 as a plain denial; the error must
// say region and name the finding.
func TestNullMessageAccessDeniedNamesTheRegion(t *testing.T) {
	h := newHarness(t, emulator.Options{}, func(o *Options) { o.Region = client.UnlistedRegion("eu-central-1") })
	_, err := h.c.GetImage(ctxT(t), mustRef(t, "anything"))
	ce := requireKind(t, err, taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion)
	if !strings.Contains(ce.Message(), "region") {
		t.Fatalf("message should point at the region: %v", err)
	}
	if n := len(h.emu.Requests()); n != 1 {
		t.Fatalf("a 403 must not be retried; %d requests sent", n)
	}
}

// Catches: classifying every 403 as the region trap; a denial with a
// message is a genuine denial.
func TestAccessDeniedWithMessageIsAGenuineDenial(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	raw := rawGet(t, h, "/2025-09-09/microvm-images/"+escapeLabel("arn:aws:lambda:us-east-1:123456789012:microvm-image/x"))
	err := classify("GetMicrovmImage", raw, 1)
	requireKind(t, err, taxonomy.KindCredentials, "")
}

// Catches: removing the slash-form refusal. The emulator shows what the
// service would say instead: a 403 that reads like IAM.
func TestSlashFormImageARNIsRefusedLocally(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	slash := "arn:aws:lambda:us-east-1:123456789012:microvm-image/x"
	_, err := ParseImageRef(slash)
	ce := requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingImageARNColon)
	if !strings.Contains(ce.Message(), "microvm-image:x") {
		t.Fatalf("refusal should show the colon form: %v", err)
	}
	if _, err := h.c.GetImage(ctxT(t), ImageRef{}); err == nil {
		t.Fatal("the zero ImageRef must be refused")
	}
	if n := len(h.emu.Requests()); n != 0 {
		t.Fatalf("refusals must come before any call; %d requests sent", n)
	}
	var se *ServiceError
	if err := rawGet(t, h, "/2025-09-09/microvm-images/"+escapeLabel(slash)); !errors.As(err, &se) || se.Status != 403 || se.Message == nil || !strings.Contains(*se.Message, "not authorized") {
		t.Fatalf("the emulator should replay the misleading 403, got %v", err)
	}
}

// Catches: a paginator that stops at the first empty page.
func TestEmptyFirstPageIsNotTheEnd(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	for _, n := range []string{"aaa", "aab", "bonk-1", "ccc", "bonk-2", "zzz-bonk"} {
		h.emu.AddImage(n)
	}
	p, err := h.c.ListImages("bonk", 1)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.NextPage(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 0 || !p.HasMorePages() {
		t.Fatalf("the emulator should answer an empty first page with a cursor; got %d items", len(first))
	}
	rest, err := p.All(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 3 {
		t.Fatalf("want 3 matches across later pages, got %d", len(rest))
	}
	found, err := h.c.FindImage(ctxT(t), "bonk-2")
	if err != nil || found == nil || found.Name != "bonk-2" {
		t.Fatalf("exact-name lookup: %v %v", found, err)
	}
	if found, _ := h.c.FindImage(ctxT(t), "bonk"); found != nil {
		t.Fatalf("nameFilter is a substring match; FindImage must compare exactly, got %s", found.Name)
	}
}

// Catches: sending the cursor unencoded. Every cursor the emulator mints
// carries '=' padding, so a walk over several pages only succeeds when each
// '=' goes out as %3D; the raw request shows the 400 the service gives.
func TestCursorPaddingIsPercentEncoded(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	for _, n := range []string{"p1", "p2", "p3", "p4"} {
		h.emu.AddImage(n)
	}
	p, _ := h.c.ListImages("", 1)
	all, err := p.All(ctxT(t))
	if err != nil || len(all) != 4 {
		t.Fatalf("walk: %d items, %v", len(all), err)
	}
	sawPad := false
	for _, r := range h.emu.Requests() {
		if strings.Contains(r.RawQuery, "nextToken=") {
			sawPad = sawPad || strings.Contains(r.RawQuery, "%3D")
		}
	}
	if !sawPad {
		t.Fatal("no cursor with encoded padding was sent; the test proves nothing")
	}
	err = classify("ListMicrovmImages", rawGet(t, h, "/2025-09-09/microvm-images?maxResults=1&nextToken=b2Zmc2V0OjE="), 1)
	requireKind(t, err, taxonomy.KindPlatform, taxonomy.FindingPaginationCursorEncoding)
}

// Catches: not retrying throttling, or not honouring Retry-After.
func TestThrottlingThenSuccess(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ref, _ := buildImage(t, h, "thr")
	before := len(h.emu.Requests())
	h.emu.Inject("GetMicrovmImage", emulator.FaultThrottle, emulator.FaultThrottle)
	if _, err := h.c.GetImage(ctxT(t), ref); err != nil {
		t.Fatal(err)
	}
	if n := len(h.emu.Requests()) - before; n != 3 {
		t.Fatalf("want 2 throttles then success (3 requests), got %d", n)
	}
}

// Catches: treating a gateway's HTML 5xx as a parse failure (Unexpected)
// rather than Retryable, or not retrying it.
func TestGatewayHTMLIsRetryable(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ref, _ := buildImage(t, h, "html")
	h.emu.Inject("GetMicrovmImage", emulator.FaultGatewayHTML)
	if _, err := h.c.GetImage(ctxT(t), ref); err != nil {
		t.Fatalf("one 502 page then success should succeed: %v", err)
	}
	one := newHarness(t, emulator.Options{}, func(o *Options) { o.MaxAttempts = 1 })
	one.emu.Inject("GetMicrovmImage", emulator.FaultGatewayHTML)
	_, err := one.c.GetImage(ctxT(t), mustRef(t, "x"))
	requireKind(t, err, taxonomy.KindRetryable, "")
	var se *ServiceError
	if !errors.As(err, &se) || !se.HTML || se.Status != 502 {
		t.Fatalf("want the HTML 502 as the cause, got %v", err)
	}
	if !strings.Contains(err.Error(), "says nothing about the request") {
		t.Fatalf("the error should say the gateway answered, not the service: %v", err)
	}
}

// Catches: retrying a 4xx (a retried 400 can only repeat the answer).
func TestNeverRetryPastA4xx(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	h.emu.Inject("GetMicrovmImage", emulator.FaultValidation)
	_, err := h.c.GetImage(ctxT(t), mustRef(t, "x"))
	requireKind(t, err, taxonomy.KindPlatform, "")
	if n := len(h.emu.Requests()); n != 1 {
		t.Fatalf("a 400 was sent %d times", n)
	}
	h.emu.Inject("GetMicrovmImage", emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal)
	_, err = h.c.GetImage(ctxT(t), mustRef(t, "x"))
	requireKind(t, err, taxonomy.KindRetryable, "")
	if n := len(h.emu.Requests()) - 1; n != 5 {
		t.Fatalf("a persistent 500 should use all 5 attempts, used %d", n)
	}
}

// Catches: a duplicate-name 400 reported without its finding.
func TestDuplicateImageNameIsA400(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	buildImage(t, h, "dup")
	_, err := h.c.CreateImage(ctxT(t), testSpec("dup"))
	requireKind(t, err, taxonomy.KindPlatform, taxonomy.FindingDuplicateImageName)
}

// Catches: a token read as a string, a missing X-aws-proxy-port, or a port
// outside the scope let through to a proxy 403.
func TestAuthTokenIsAHeaderMapScopedByPort(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	ref, _ := buildImage(t, h, "tok")
	vm, _ := h.c.Launch(ctx, LaunchSpec{Image: ref, Connectors: Connectors{Ingress: true}})
	tok, err := h.c.MintAuthToken(ctx, vm.MicrovmId, TokenRequest{Ports: []PortScope{Port(9000), PortRange(8000, 8010)}, Expiry: 60 * 60e9})
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := tok.Headers(8005)
	if err != nil || hdr[taxonomy.ProxyAuthHeader] == "" || hdr[taxonomy.ProxyPortHeader] != "8005" {
		t.Fatalf("headers %v, %v", hdr, err)
	}
	_, err = tok.Headers(8080)
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingAllowedPortsUnion)
	last := h.emu.Requests()[len(h.emu.Requests())-1]
	if want := `"allowedPorts":[{"port":9000},{"range":{"endPort":8010,"startPort":8000}}]`; !strings.Contains(string(last.Body), want) {
		t.Fatalf("union wire form: body %s, want %s", last.Body, want)
	}
	if strings.Contains(tok.String(), hdr[taxonomy.ProxyAuthHeader]) {
		t.Fatal("String must not print the token")
	}
}

func mustRef(t *testing.T, s string) ImageRef {
	t.Helper()
	r, err := ParseImageRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rawGet sends a signed GET for an exact escaped path and query, bypassing
// the closures, to show what the service says to a request they would stop.
func rawGet(t *testing.T, h *harness, pathAndQuery string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, h.url+pathAndQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := h.c.api.ClientInterface.(*cp.Client).Client.(*signingTransport)
	rawQuery := req.URL.RawQuery
	if err := tr.sign(req.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	// The signer re-encodes the query it signs; put the raw one back so
	// the wire carries exactly what the caller wrote.
	req.URL.RawQuery = rawQuery
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return nil
	}
	body := make([]byte, 4096)
	n, _ := resp.Body.Read(body)
	return parseServiceError(resp, body[:n])
}
