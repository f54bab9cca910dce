package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/emulator"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: Options.Now replaced when it was set, or left nil when it was
// not (`o.Now != nil`): a minted token's Expires is read from the client's
// clock, so a pinned clock must pin it, and an unset one must be the wall
// clock rather than a nil function.
func TestMintedTokenExpiresByTheClientsClock(t *testing.T) {
	const expiry = 30 * time.Minute
	req := TokenRequest{Ports: []PortScope{Port(9000)}, Expiry: expiry}
	launch := func(h *harness) string {
		t.Helper()
		ref, _ := buildImage(t, h, "clock")
		vm, err := h.c.Launch(ctxT(t), LaunchSpec{Image: ref, Connectors: Connectors{Ingress: true}})
		if err != nil {
			t.Fatal(err)
		}
		return vm.MicrovmId
	}
	pinned := newHarness(t, emulator.Options{}, nil)
	tok, err := pinned.c.MintAuthToken(ctxT(t), launch(pinned), req)
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Expires.Equal(fixedNow.Add(expiry)) {
		t.Fatalf("with Now pinned at %s, the token expires %s", fixedNow, tok.Expires)
	}
	wall := newHarness(t, emulator.Options{}, func(o *Options) { o.Now = nil })
	id := launch(wall)
	before := time.Now()
	tok, err = wall.c.MintAuthToken(ctxT(t), id, req)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if tok.Expires.Before(before.Add(expiry)) || tok.Expires.After(after.Add(expiry)) {
		t.Fatalf("with Now unset, the token expires %s, not %s after the mint (between %s and %s)", tok.Expires, expiry, before, after)
	}
}

// Catches: the ceiling refusal reporting the env's share or the excess
// wrongly (a sign flipped or the subtraction turned into an addition): the
// env is the part a caller can shrink, so both numbers are the advice.
func TestRunHookPayloadRefusalNamesTheEnvShareAndTheExcess(t *testing.T) {
	bare, err := NewRunHookPayload("tok", map[string]string{"PAD": ""})
	if err != nil {
		t.Fatal(err)
	}
	pad := taxonomy.MaxRunHookPayloadBytes - bare.Len() + 10 // ten bytes over
	_, err = NewRunHookPayload("tok", map[string]string{"PAD": strings.Repeat("x", pad)})
	ce := requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingRunHookPayloadCeiling)
	full := taxonomy.MaxRunHookPayloadBytes + 10
	noEnv := len(`{"agent_token":"tok"}`)
	for _, want := range []string{
		"is " + strconv.Itoa(full) + " bytes",
		"accounts for " + strconv.Itoa(full-noEnv) + " of them across 1 variables",
		"so trim 10 bytes",
	} {
		if !strings.Contains(ce.Message(), want) {
			t.Errorf("refusal lacks %q: %s", want, ce.Message())
		}
	}
}

// Catches: whitespace refused only after the first byte (`i > 0`).
func TestImageVersionWithLeadingWhitespaceIsRefused(t *testing.T) {
	for _, v := range []string{" 1", "\t1.0"} {
		requireKind(t, CheckImageVersion(v), taxonomy.KindInvalidArg, taxonomy.FindingImageVersionForm)
	}
}

// Catches: the duration bounds one off at either end (`sec <= Min`,
// `sec >= Max`): both 1 s and 8 h are allowed, 0.5 s past either is not.
func TestMaxDurationBoundsAreInclusive(t *testing.T) {
	for _, d := range []time.Duration{taxonomy.MinDurationSec * time.Second, taxonomy.MaxDurationSec * time.Second} {
		n, err := checkMaxDuration(d)
		if err != nil || n == nil || *n != int(d/time.Second) {
			t.Errorf("%s: %v %v", d, n, err)
		}
	}
	for _, d := range []time.Duration{time.Second / 2, taxonomy.MaxDurationSec*time.Second + time.Second, time.Second + time.Second/2} {
		if _, err := checkMaxDuration(d); err == nil {
			t.Errorf("%s accepted", d)
		}
	}
	if n, err := checkMaxDuration(0); n != nil || err != nil {
		t.Errorf("0 (unset) should send nothing: %v %v", n, err)
	}
}

// Catches: a range scope that leaves out either end (`StartPort < port`,
// `port < EndPort`): the range is inclusive, and the proxy lets both ends
// through, so refusing them locally would refuse a call that works.
func TestPortRangeCoversBothEnds(t *testing.T) {
	tok, err := newAuthToken(map[string]string{taxonomy.ProxyAuthHeader: "x"}, TokenRequest{Ports: []PortScope{PortRange(8000, 8010)}}, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	for port, in := range map[int]bool{7999: false, 8000: true, 8005: true, 8010: true, 8011: false} {
		if _, err := tok.Headers(port); (err == nil) != in {
			t.Errorf("port %d: covered=%v, want %v", port, err == nil, in)
		}
	}
}

// Catches: the port bounds one off at either end (`p > 1`, `p < 65535`):
// 1 and 65535 are ports, 0 and 65536 are not, alone or as a range's ends;
// and a one-port range refused as unordered (`StartPort >= EndPort`).
func TestPortScopeBoundsAreInclusive(t *testing.T) {
	for _, p := range []PortScope{Port(1), Port(65535), PortRange(1, 65535), PortRange(8080, 8080)} {
		if err := p.check(); err != nil {
			t.Errorf("%+v: %v", p.spec, err)
		}
	}
	for _, p := range []PortScope{Port(0), Port(65536), PortRange(0, 10), PortRange(10, 65536)} {
		if err := p.check(); err == nil {
			t.Errorf("%+v accepted", p.spec)
		}
	}
}

// Catches: a one-minute token refused (`min <= 1`): expiry is 1..60 whole
// minutes inclusive.
func TestTokenExpiryOfOneMinuteIsAllowed(t *testing.T) {
	w, err := TokenRequest{Ports: []PortScope{Port(80)}, Expiry: time.Minute}.wire()
	if err != nil || w.ExpirationInMinutes != 1 {
		t.Fatalf("1 minute: %v %v", w.ExpirationInMinutes, err)
	}
}

// Catches: an unnamed service error printed with an empty name (a negated
// `typ == ""`), and the exception name lost when it comes only in the body's
// __type or code (negating either fallback).
func TestServiceErrorNameFallsBackThroughTheBody(t *testing.T) {
	if s := (&ServiceError{Status: 400}).Error(); s != "HTTP 400 an unnamed error, no message" {
		t.Errorf("unnamed: %q", s)
	}
	if s := (&ServiceError{Status: 404, Type: "ResourceNotFoundException"}).Error(); s != "HTTP 404 ResourceNotFoundException, no message" {
		t.Errorf("named: %q", s)
	}
	for _, c := range []struct{ header, body, want string }{
		{"", `{"__type":"com.amazonaws.lambdamicrovms#ValidationException","message":"m"}`, "ValidationException"},
		{"", `{"code":"ThrottlingException"}`, "ThrottlingException"},
		{"", `{"__type":"A","code":"B"}`, "A"},
		{"ConflictException:http://internal.amazon.com/", `{"__type":"A","code":"B"}`, "ConflictException"},
	} {
		resp := &http.Response{StatusCode: 400, Header: http.Header{}}
		if c.header != "" {
			resp.Header.Set("X-Amzn-ErrorType", c.header)
		}
		if got := parseServiceError(resp, []byte(c.body)).Type; got != c.want {
			t.Errorf("header %q body %s: type %q, want %q", c.header, c.body, got, c.want)
		}
	}
}

// Catches: the attempt count reported on a single attempt, or left out
// after several (`attempts >= 1`, `attempts <= 1`).
func TestClassifyNamesRetriesOnlyWhenThereWereSome(t *testing.T) {
	if msg := classify("Op", context.DeadlineExceeded, 1).Error(); strings.Contains(msg, "attempts") {
		t.Errorf("one attempt: %q", msg)
	}
	if msg := classify("Op", context.DeadlineExceeded, 2).Error(); !strings.Contains(msg, "deadline passed after 2 attempts") {
		t.Errorf("two attempts: %q", msg)
	}
}

// Catches: the exactly-one rule on an image's Logging inverted or dropped
// on either side: CloudWatch alone and Disabled alone pass, both or neither
// are refused before anything is sent.
func TestImageLoggingIsExactlyOneKind(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	cw, off := &cp.CloudWatchLogging{}, &cp.LoggingDisabled{}
	for i, c := range []struct {
		l  *cp.Logging
		ok bool
	}{
		{&cp.Logging{CloudWatch: cw}, true},
		{&cp.Logging{Disabled: off}, true},
		{&cp.Logging{CloudWatch: cw, Disabled: off}, false},
		{&cp.Logging{}, false},
	} {
		s := testSpec(fmt.Sprintf("logging%d", i))
		s.Logging = c.l
		_, err := h.c.buildSpec(s)
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok=%v", *c.l, err, c.ok)
		}
	}
}

// Catches: an operation that drops its reply on success (`err == nil` after
// the call returns nil, nil) or reads a reply that failed: each image
// operation must hand back what the service answered.
func TestImageOperationsReturnTheirReplies(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	ref, v1 := buildImage(t, h, "replies")
	up, err := h.c.UpdateImage(ctx, ref, testSpec("replies"))
	if err != nil || up == nil || up.ImageVersion == "" || up.ImageVersion == v1 {
		t.Fatalf("UpdateImage: %+v %v", up, err)
	}
	if _, err := h.c.WaitImage(ctx, ref, up.ImageVersion, fastWait); err != nil {
		t.Fatal(err)
	}
	got, err := h.c.GetImageVersion(ctx, ref, v1)
	if err != nil || got == nil || got.BuildRoleArn != testSpec("replies").BuildRoleARN {
		t.Fatalf("GetImageVersion: %+v %v", got, err)
	}
	set, err := h.c.SetImageVersionStatus(ctx, ref, v1, cp.INACTIVE)
	if err != nil || set == nil || set.Status != cp.INACTIVE {
		t.Fatalf("SetImageVersionStatus: %+v %v", set, err)
	}
	builds, err := h.c.builds(ctx, ref, v1)
	if err != nil || len(builds) == 0 {
		t.Fatalf("builds of %s: %v %v", v1, builds, err)
	}
	b, err := h.c.GetImageBuild(ctx, ref, v1, builds[0].BuildId)
	if err != nil || b == nil || b.BuildId != builds[0].BuildId {
		t.Fatalf("GetImageBuild: %+v %v", b, err)
	}
	if err := h.c.TagImage(ctx, ref, map[string]string{"team": "a"}); err != nil {
		t.Fatal(err)
	}
	tags, err := h.c.ImageTags(ctx, ref)
	if err != nil || tags["team"] != "a" {
		t.Fatalf("ImageTags: %v %v", tags, err)
	}
	dv, err := h.c.DeleteImageVersion(ctx, ref, v1)
	if err != nil || dv == nil || dv.ImageVersion != v1 {
		t.Fatalf("DeleteImageVersion: %+v %v", dv, err)
	}
	del, err := h.c.DeleteImage(ctx, ref)
	if err != nil || del == nil || del.State == "" {
		t.Fatalf("DeleteImage: %+v %v", del, err)
	}
	// A refused call is an error, never a reply: the image is gone.
	if _, err := h.c.GetImageVersion(ctx, ref, v1); err == nil {
		t.Fatal("GetImageVersion of a deleted image answered")
	}
	if _, err := h.c.UpdateImage(ctx, ref, testSpec("replies")); err == nil {
		t.Fatal("UpdateImage of a deleted image answered")
	}
	if _, err := h.c.GetImageBuild(ctx, ref, v1, builds[0].BuildId); err == nil {
		t.Fatal("GetImageBuild of a deleted image answered")
	}
	if _, err := h.c.DeleteImageVersion(ctx, ref, up.ImageVersion); err == nil {
		t.Fatal("DeleteImageVersion of a deleted image answered")
	}
	if _, err := h.c.ImageTags(ctx, ref); err == nil {
		t.Fatal("ImageTags of a deleted image answered")
	}
}

// Catches: a valid reference waved through before the ARN check
// (`err == nil` returning early): tagging takes the image's ARN, never its
// name, and the refusal names the finding.
func TestTaggingByNameIsRefused(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	err := h.c.TagImage(ctxT(t), mustRef(t, "by-name"), map[string]string{"k": "v"})
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingImageARNColon)
}

// Catches: an image name of exactly the maximum length refused
// (`len(s.Name) >= MaxImageNameLen`), and tags sent when there are none
// (`len(s.Tags) >= 0` puts "tags": null on the wire).
func TestCreateImageNameLengthAndAbsentTags(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	if _, err := h.c.CreateImage(ctx, testSpec(strings.Repeat("n", taxonomy.MaxImageNameLen))); err != nil {
		t.Fatalf("a name of exactly %d bytes: %v", taxonomy.MaxImageNameLen, err)
	}
	requireKind(t, func() error {
		_, err := h.c.CreateImage(ctx, testSpec(strings.Repeat("n", taxonomy.MaxImageNameLen+1)))
		return err
	}(), taxonomy.KindInvalidArg, "")
	tagged := testSpec("tagged")
	tagged.Tags = map[string]string{"team": "a"}
	if _, err := h.c.CreateImage(ctx, tagged); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, r := range h.emu.Requests() {
		if r.Method == http.MethodPost {
			bodies = append(bodies, string(r.Body))
		}
	}
	if len(bodies) != 2 || strings.Contains(bodies[0], `"tags"`) || !strings.Contains(bodies[1], `"tags":{"team":"a"}`) {
		t.Fatalf("create bodies: %q", bodies)
	}
}

// Catches: the idle window's minimum refused (`MaxIdle <= Min`) or a zero
// suspended window refused (`SuspendedFor <= 0`): both ends are allowed,
// one second under the minimum is not.
func TestIdlePolicyBoundsAreInclusive(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ref := mustRef(t, "arn:aws:lambda:us-east-1:123456789012:microvm-image:idle")
	min := taxonomy.MinIdleDurationSec * time.Second
	req, err := h.c.launchRequest(LaunchSpec{Image: ref, Idle: &IdlePolicy{MaxIdle: min}})
	if err != nil || req.IdlePolicy == nil || req.IdlePolicy.MaxIdleDurationSeconds != taxonomy.MinIdleDurationSec || req.IdlePolicy.SuspendedDurationSeconds != 0 {
		t.Fatalf("the minimum idle window: %+v %v", req.IdlePolicy, err)
	}
	_, err = h.c.launchRequest(LaunchSpec{Image: ref, Idle: &IdlePolicy{MaxIdle: min - time.Second}})
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingIdlePolicy)
}

// Catches: an id of exactly the model's 256-byte maximum refused
// (`len(id) >= 256`); MicrovmIdentifier is length 1..256.
func TestMicrovmIDLengthBoundIsInclusive(t *testing.T) {
	if err := checkID(strings.Repeat("m", 256)); err != nil {
		t.Fatalf("256 bytes: %v", err)
	}
	if err := checkID(strings.Repeat("m", 257)); err == nil {
		t.Fatal("257 bytes accepted")
	}
}

// Catches: firstErr returning the first nil instead of the first error
// (`e == nil`): a valid reference would then hide an invalid version.
func TestAnInvalidVersionIsRefusedBehindAValidReference(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	_, err := h.c.GetImageVersion(ctxT(t), mustRef(t, "fine"), "two words")
	requireKind(t, err, taxonomy.KindInvalidArg, taxonomy.FindingImageVersionForm)
}

// Catches: the page bound one off (`p.pages > maxPages`) or never reached
// (`p.pages--`): a listing whose cursors never end stops after exactly
// maxPages fetches, naming the finding, instead of looping.
func TestEndlessListingStopsAtMaxPages(t *testing.T) {
	calls := 0
	p := newPaginator(func(_ context.Context, _ *string) ([]int, *string, error) {
		calls++
		if calls > 2*maxPages { // bounds this test if the paginator does not
			return nil, nil, nil
		}
		next := strconv.Itoa(calls)
		return []int{calls}, &next, nil
	})
	items, err := p.All(ctxT(t))
	requireKind(t, err, taxonomy.KindPlatform, taxonomy.FindingMaxResultsBeforeNameFilter)
	if calls != maxPages || len(items) != maxPages || p.Pages() != maxPages {
		t.Fatalf("fetched %d pages (%d items, Pages %d), want %d", calls, len(items), p.Pages(), maxPages)
	}
}

// Catches: a page size bound one off (`n <= 1`, `n >= 50`).
func TestPageSizeBoundsAreInclusive(t *testing.T) {
	for _, n := range []int{1, 50} {
		if got, err := pageSize(n); err != nil || got == nil || *got != n {
			t.Errorf("%d: %v %v", n, got, err)
		}
	}
	for _, n := range []int{-1, 51} {
		if _, err := pageSize(n); err == nil {
			t.Errorf("%d accepted", n)
		}
	}
}

// Catches: a list operation that answers an empty page for a failed call,
// or drops the page it got (a negated error check in its fetch).
func TestImageVersionListingReturnsItsPagesAndErrors(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	ref, v1 := buildImage(t, h, "versions")
	p, err := h.c.ListImageVersions(ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := p.All(ctx)
	if err != nil || len(vs) != 1 || vs[0].ImageVersion != v1 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	if _, err := h.c.DeleteImage(ctx, ref); err != nil {
		t.Fatal(err)
	}
	p, _ = h.c.ListImageVersions(ref, 0)
	if _, err := p.All(ctx); err == nil {
		t.Fatal("the versions of a deleted image listed without error")
	}
}

// Catches: a list operation whose fetch answers an empty page for a failed
// call or drops the page it got (a negated error check in ListImages,
// ListImageBuilds, ListMicrovms, ListManagedImages or
// ListManagedImageVersions): each must list what the service holds and
// surface an injected 400 as an error.
func TestEveryListingReturnsItsItemsAndItsErrors(t *testing.T) {
	h := newHarness(t, emulator.Options{}, nil)
	ctx := ctxT(t)
	ref, v1 := buildImage(t, h, "listed")
	vm, err := h.c.Launch(ctx, LaunchSpec{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	count := func(op string, list func() (int, error)) {
		t.Helper()
		n, err := list()
		if err != nil || n == 0 {
			t.Errorf("%s: %d items, %v", op, n, err)
		}
		h.emu.Inject(op, emulator.FaultValidation)
		if _, err := list(); err == nil || !strings.Contains(err.Error(), "ValidationException") {
			t.Errorf("%s with a 400 injected: %v", op, err)
		}
	}
	count("ListMicrovmImages", func() (int, error) {
		p, _ := h.c.ListImages("listed", 0)
		items, err := p.All(ctx)
		return len(items), err
	})
	count("ListMicrovmImageBuilds", func() (int, error) {
		p, _ := h.c.ListImageBuilds(ref, v1, 0)
		items, err := p.All(ctx)
		return len(items), err
	})
	count("ListMicrovms", func() (int, error) {
		p, _ := h.c.ListMicrovms(&ref, v1, 0)
		items, err := p.All(ctx)
		for _, it := range items {
			if it.MicrovmId != vm.MicrovmId {
				return 0, fmt.Errorf("listed %s, launched only %s", it.MicrovmId, vm.MicrovmId)
			}
		}
		return len(items), err
	})
	count("ListManagedMicrovmImages", func() (int, error) {
		p, _ := h.c.ListManagedImages(0)
		items, err := p.All(ctx)
		return len(items), err
	})
	count("ListManagedMicrovmImageVersions", func() (int, error) {
		p, _ := h.c.ListManagedImageVersions(h.c.ManagedBaseImageARN(), 0)
		items, err := p.All(ctx)
		return len(items), err
	})
}

// Catches: the defaults of an unset Options lost or applied over a caller's
// values: the HTTP timeout (60 s; `60 / time.Second` is none at all), the
// retry ceiling (20 s when unset, the caller's otherwise; `MaxBackoff < 0`
// keeps a zero ceiling, `> 0` overrides the caller's) and five attempts.
func TestTransportDefaultsApplyOnlyWhenUnset(t *testing.T) {
	def := newSigningTransport(&Options{}, nil)
	if def.http.Timeout != 60*time.Second || def.maxRetryAft != 20*time.Second || def.retryer.MaxAttempts() != 5 {
		t.Fatalf("defaults: timeout %s, ceiling %s, attempts %d", def.http.Timeout, def.maxRetryAft, def.retryer.MaxAttempts())
	}
	hc := &http.Client{}
	set := newSigningTransport(&Options{HTTPClient: hc, MaxBackoff: 5 * time.Millisecond, MaxAttempts: 2}, nil)
	if set.http != hc || set.maxRetryAft != 5*time.Millisecond || set.retryer.MaxAttempts() != 2 {
		t.Fatalf("a caller's values were replaced: ceiling %s, attempts %d", set.maxRetryAft, set.retryer.MaxAttempts())
	}
}

// Catches: a label escaper that escapes an unreserved letter or digit at
// either end of its range (`'A' < c`, `c < 'z'`, ...), or leaves a reserved
// byte bare: AWS SDKs escape everything outside RFC 3986's unreserved set.
func TestEscapeLabelKeepsExactlyTheUnreservedSet(t *testing.T) {
	const in = "AZaz09-_.~:/ @é"
	const want = "AZaz09-_.~%3A%2F%20%40%C3%A9"
	if got := escapeLabel(in); got != want {
		t.Fatalf("escapeLabel(%q) = %q, want %q", in, got, want)
	}
}

// Catches: a 3xx taken for success (`StatusCode <= 300`): only 2xx is an
// answer; anything else is a service error carrying its status.
func TestA300IsNotASuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMultipleChoices)
		_, _ = w.Write([]byte(`{"microvmId":"mvm-1","state":"RUNNING"}`))
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, emulator.Options{}, func(o *Options) { o.Endpoint = srv.URL; o.MaxAttempts = 1 })
	_, err := h.c.GetMicrovm(ctxT(t), "mvm-1")
	var se *ServiceError
	if !errors.As(err, &se) || se.Status != http.StatusMultipleChoices {
		t.Fatalf("a 300 answered %v", err)
	}
}

// Catches: a Retry-After misread: ignored when present (`v != ""`), "0"
// (the emulator's throttle) not read as seconds (`n > 0`), seconds divided
// instead of multiplied, the overflow clamp one off at its edge, or an
// HTTP-date ignored (a negated ParseTime check).
func TestRetryAfterForms(t *testing.T) {
	get := func(v string) *time.Duration {
		h := http.Header{}
		if v != "" {
			h.Set("Retry-After", v)
		}
		return retryAfter(h)
	}
	if d := get(""); d != nil {
		t.Errorf("absent: %v", *d)
	}
	for v, want := range map[string]time.Duration{
		"0":          0,
		"3":          3 * time.Second,
		"9223372036": 9223372036 * time.Second, // the largest that does not overflow
		"9223372037": time.Duration(math.MaxInt64),
	} {
		if d := get(v); d == nil || *d != want {
			t.Errorf("%q: %v, want %s", v, d, want)
		}
	}
	if d := get(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)); d == nil || *d <= 30*time.Minute || *d > time.Hour {
		t.Errorf("an HTTP-date an hour ahead: %v", d)
	}
	if d := get("Mon, 02 Jan 2006 15:04:05 GMT"); d == nil || *d != 0 {
		t.Errorf("an HTTP-date in the past: %v", d)
	}
	if d := get("soon"); d != nil {
		t.Errorf("garbage: %v", *d)
	}
}

// Catches: a wait default applied over a caller's value or not applied to
// a zero one (`o.Interval < 0`, `o.Timeout > 0`, ...).
func TestWaitDefaultsApplyOnlyWhenUnset(t *testing.T) {
	d := WaitOptions{}.withDefaults(7 * time.Minute)
	if d.Interval != 10*time.Second || d.Timeout != 7*time.Minute || d.Grace != 10*time.Minute {
		t.Fatalf("defaults: %+v", d)
	}
	set := WaitOptions{Interval: time.Millisecond, Timeout: time.Second, Grace: time.Minute}
	if got := set.withDefaults(7 * time.Minute); got.Interval != set.Interval || got.Timeout != set.Timeout || got.Grace != set.Grace {
		t.Fatalf("a caller's values were replaced: %+v", got)
	}
}

// Catches: poll numbers counted down (`n--`): Progress numbers the polls
// 1, 2, 3 as they happen.
func TestProgressNumbersThePolls(t *testing.T) {
	s := &scriptedVM{states: []cp.MicrovmState{cp.MicrovmStatePENDING, cp.MicrovmStatePENDING, cp.MicrovmStateRUNNING}}
	var polls []int
	o := fastWait
	o.Progress = func(p Progress) { polls = append(polls, p.Poll) }
	if _, err := scriptedClient(t, s).WaitRunning(ctxT(t), "mvm-0123456789abcdef", o); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(polls) != "[1 2 3]" {
		t.Fatalf("polls numbered %v", polls)
	}
}

// Catches: a default wait bound that is no bound, or none at all (`30 /
// time.Minute` is zero, and a zero timeout ends the wait before its first
// answer): with neither a deadline nor a Timeout, an image that builds is
// waited for.
func TestWaitImageWithoutADeadlineUsesItsDefault(t *testing.T) {
	h := newHarness(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Steps: 2} }}, nil)
	created, err := h.c.CreateImage(ctxT(t), testSpec("undeadlined"))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := ParseImageRef(created.ImageArn)
	if _, err := h.c.WaitImage(context.Background(), ref, created.ImageVersion, WaitOptions{Interval: time.Millisecond}); err != nil {
		t.Fatalf("no deadline, no Timeout: %v", err)
	}
	vm, err := h.c.Launch(ctxT(t), LaunchSpec{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.WaitRunning(context.Background(), vm.MicrovmId, WaitOptions{Interval: time.Millisecond}); err != nil {
		t.Fatalf("no deadline, no Timeout: %v", err)
	}
}
