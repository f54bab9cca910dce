package lambdamicrovms

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// opRecorder notes the name of every operation a client invokes.
type opRecorder struct {
	mu  sync.Mutex
	ops map[string]int
}

func (r *opRecorder) ID() string { return "RecordOperation" }

func (r *opRecorder) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleInitialize(ctx, in)
	if err == nil {
		r.mu.Lock()
		r.ops[awsmiddleware.GetOperationName(ctx)]++
		r.mu.Unlock()
	}
	return out, md, err
}

func newEmulatorClient(t *testing.T, eo emulator.Options) (*Client, *opRecorder) {
	t.Helper()
	emu := emulator.New(eo)
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rec := &opRecorder{ops: map[string]int{}}
	c := testClient(url, func(o *Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(rec, middleware.After)
		})
	})
	return c, rec
}

// fastWaiter polls without the production delays: the emulator advances per
// observation, never by the clock.
func fastDelays(minDelay, maxDelay *time.Duration) {
	*minDelay, *maxDelay = time.Millisecond, 2*time.Millisecond
}

// Every one of the model's 24 operations, driven through the emulator in a
// full lifecycle with the generated paginators and waiters, and counted.
//
// Catches: an operation the emulator (the service's stand-in) refuses or
// answers in a shape the client cannot read, a paginator that stops early or
// never stops, a waiter whose acceptors miss the emulator's states, and an
// operation of the model missing from the client.
func TestEveryOperationAgainstTheEmulator(t *testing.T) {
	c, rec := newEmulatorClient(t, emulator.Options{})
	ctx := ctxT(t)
	const maxWait = 20 * time.Second
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Managed base images.
	var base string
	mp := NewListManagedMicrovmImagesPaginator(c, &ListManagedMicrovmImagesInput{})
	for mp.HasMorePages() {
		page, err := mp.NextPage(ctx)
		must(err)
		for _, it := range page.Items {
			base = *it.ImageArn
		}
	}
	if base == "" {
		t.Fatal("no managed image listed")
	}
	mvp := NewListManagedMicrovmImageVersionsPaginator(c, &ListManagedMicrovmImageVersionsInput{ImageIdentifier: aws.String(base)})
	var baseVersions int
	for mvp.HasMorePages() {
		page, err := mvp.NextPage(ctx)
		must(err)
		baseVersions += len(page.Items)
	}
	if baseVersions == 0 {
		t.Fatal("the managed image lists no versions")
	}

	// An image: create, wait, read every way.
	created, err := c.CreateMicrovmImage(ctx, &CreateMicrovmImageInput{
		Name:         aws.String("e2e"),
		BaseImageArn: aws.String(base),
		BuildRoleArn: aws.String("arn:aws:iam::123456789012:role/build"),
		CodeArtifact: &types.CodeArtifactMemberUri{Value: "s3://bucket/e2e.zip"},
		Tags:         map[string]string{"team": "sdk"},
	})
	must(err)
	imageID := created.ImageArn
	_, err = NewMicrovmImageAvailableWaiter(c, func(o *MicrovmImageAvailableWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		WaitForOutput(ctx, &GetMicrovmImageInput{ImageIdentifier: imageID}, maxWait)
	must(err)
	img, err := c.GetMicrovmImage(ctx, &GetMicrovmImageInput{ImageIdentifier: imageID})
	must(err)
	if img.State != types.MicrovmImageStateCreated {
		t.Fatalf("image state %s", img.State)
	}
	var found bool
	ip := NewListMicrovmImagesPaginator(c, &ListMicrovmImagesInput{NameFilter: aws.String("e2e")}, func(o *ListMicrovmImagesPaginatorOptions) { o.Limit = 1 })
	for ip.HasMorePages() {
		page, err := ip.NextPage(ctx)
		must(err)
		for _, it := range page.Items {
			found = found || *it.Name == "e2e"
		}
	}
	if !found {
		t.Fatal("ListMicrovmImages did not list the image")
	}
	vp := NewListMicrovmImageVersionsPaginator(c, &ListMicrovmImageVersionsInput{ImageIdentifier: imageID})
	var versions []string
	for vp.HasMorePages() {
		page, err := vp.NextPage(ctx)
		must(err)
		for _, v := range page.Items {
			versions = append(versions, *v.ImageVersion)
		}
	}
	if len(versions) != 1 || versions[0] != *created.ImageVersion {
		t.Fatalf("versions %v, created %s", versions, *created.ImageVersion)
	}
	_, err = NewMicrovmImageVersionSuccessfulWaiter(c, func(o *MicrovmImageVersionSuccessfulWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		WaitForOutput(ctx, &GetMicrovmImageVersionInput{ImageIdentifier: imageID, ImageVersion: created.ImageVersion}, maxWait)
	must(err)
	ver, err := c.GetMicrovmImageVersion(ctx, &GetMicrovmImageVersionInput{ImageIdentifier: imageID, ImageVersion: created.ImageVersion})
	must(err)
	if ver.Status != types.MicrovmImageVersionStatusActive {
		t.Fatalf("version status %s", ver.Status)
	}
	bp := NewListMicrovmImageBuildsPaginator(c, &ListMicrovmImageBuildsInput{ImageIdentifier: imageID, ImageVersion: created.ImageVersion, Architecture: types.ArchitectureArm64})
	var buildID *string
	for bp.HasMorePages() {
		page, err := bp.NextPage(ctx)
		must(err)
		for _, b := range page.Items {
			buildID = b.BuildId
		}
	}
	if buildID == nil {
		t.Fatal("no builds listed")
	}
	build, err := c.GetMicrovmImageBuild(ctx, &GetMicrovmImageBuildInput{ImageIdentifier: imageID, ImageVersion: created.ImageVersion, BuildId: buildID})
	must(err)
	if build.BuildState != types.BuildStateSuccessful {
		t.Fatalf("build %s", build.BuildState)
	}

	// Tags.
	_, err = c.TagResource(ctx, &TagResourceInput{Resource: imageID, Tags: map[string]string{"stage": "test"}})
	must(err)
	tags, err := c.ListTags(ctx, &ListTagsInput{Resource: imageID})
	must(err)
	if tags.Tags["stage"] != "test" || tags.Tags["team"] != "sdk" {
		t.Fatalf("tags %v", tags.Tags)
	}
	_, err = c.UntagResource(ctx, &UntagResourceInput{Resource: imageID, TagKeys: []string{"stage"}})
	must(err)
	tags, err = c.ListTags(ctx, &ListTagsInput{Resource: imageID})
	must(err)
	if _, ok := tags.Tags["stage"]; ok {
		t.Fatalf("untagged key still listed: %v", tags.Tags)
	}

	// A second version, then the first set INACTIVE and ACTIVE again.
	updated, err := c.UpdateMicrovmImage(ctx, &UpdateMicrovmImageInput{
		ImageIdentifier: imageID,
		BaseImageArn:    aws.String(base),
		BuildRoleArn:    aws.String("arn:aws:iam::123456789012:role/build"),
		CodeArtifact:    &types.CodeArtifactMemberUri{Value: "s3://bucket/e2e-2.zip"},
	})
	must(err)
	_, err = NewMicrovmImageAvailableWaiter(c, func(o *MicrovmImageAvailableWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		WaitForOutput(ctx, &GetMicrovmImageInput{ImageIdentifier: imageID}, maxWait)
	must(err)
	for _, st := range []types.MicrovmImageVersionStatus{types.MicrovmImageVersionStatusInactive, types.MicrovmImageVersionStatusActive} {
		out, err := c.UpdateMicrovmImageVersion(ctx, &UpdateMicrovmImageVersionInput{ImageIdentifier: imageID, ImageVersion: created.ImageVersion, Status: st})
		must(err)
		if out.Status != st {
			t.Fatalf("status %s after setting %s", out.Status, st)
		}
	}

	// A MicroVM through its whole life.
	run, err := c.RunMicrovm(ctx, &RunMicrovmInput{
		ImageIdentifier: imageID,
		ImageVersion:    updated.ImageVersion,
		// HTTP_INGRESS, not ALL_INGRESS: the platform refuses a shell token
		// for ALL_INGRESS beside another ingress connector (finding
		// shell-endpoint), and the shell token below is part of the walk.
		IngressNetworkConnectors: []string{ConnectorARN("us-east-1", "HTTP_INGRESS"), ConnectorARN("us-east-1", "SHELL_INGRESS")},
		RunHookPayload:           aws.String(`{"agent_token":"t"}`),
	})
	must(err)
	vmID := run.MicrovmId
	vmWait := func(o *MicrovmRunningWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }
	running, err := NewMicrovmRunningWaiter(c, vmWait).WaitForOutput(ctx, &GetMicrovmInput{MicrovmIdentifier: vmID}, maxWait)
	must(err)
	if running.State != types.MicrovmStateRunning || running.StartedAt == nil {
		t.Fatalf("after the running waiter: %s", running.State)
	}
	lp := NewListMicrovmsPaginator(c, &ListMicrovmsInput{ImageIdentifier: imageID})
	var listed bool
	for lp.HasMorePages() {
		page, err := lp.NextPage(ctx)
		must(err)
		for _, it := range page.Items {
			listed = listed || *it.MicrovmId == *vmID
		}
	}
	if !listed {
		t.Fatal("ListMicrovms did not list the MicroVM")
	}
	tok, err := c.CreateMicrovmAuthToken(ctx, &CreateMicrovmAuthTokenInput{
		MicrovmIdentifier:   vmID,
		ExpirationInMinutes: aws.Int32(15),
		AllowedPorts:        []types.PortSpecification{&types.PortSpecificationMemberPort{Value: 8080}},
	})
	must(err)
	if len(tok.AuthToken) == 0 {
		t.Fatal("no auth token headers")
	}
	shell, err := c.CreateMicrovmShellAuthToken(ctx, &CreateMicrovmShellAuthTokenInput{MicrovmIdentifier: vmID, ExpirationInMinutes: aws.Int32(5)})
	must(err)
	if len(shell.AuthToken) == 0 {
		t.Fatal("no shell token headers")
	}
	_, err = c.SuspendMicrovm(ctx, &SuspendMicrovmInput{MicrovmIdentifier: vmID})
	must(err)
	_, err = NewMicrovmSuspendedWaiter(c, func(o *MicrovmSuspendedWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		WaitForOutput(ctx, &GetMicrovmInput{MicrovmIdentifier: vmID}, maxWait)
	must(err)
	_, err = c.ResumeMicrovm(ctx, &ResumeMicrovmInput{MicrovmIdentifier: vmID})
	must(err)
	_, err = NewMicrovmRunningWaiter(c, vmWait).WaitForOutput(ctx, &GetMicrovmInput{MicrovmIdentifier: vmID}, maxWait)
	must(err)
	_, err = c.TerminateMicrovm(ctx, &TerminateMicrovmInput{MicrovmIdentifier: vmID})
	must(err)
	_, err = NewMicrovmTerminatedWaiter(c, func(o *MicrovmTerminatedWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		WaitForOutput(ctx, &GetMicrovmInput{MicrovmIdentifier: vmID}, maxWait)
	must(err)

	// Teardown: the first version, then the image.
	_, err = c.DeleteMicrovmImageVersion(ctx, &DeleteMicrovmImageVersionInput{ImageIdentifier: imageID, ImageVersion: created.ImageVersion})
	must(err)
	_, err = c.DeleteMicrovmImage(ctx, &DeleteMicrovmImageInput{ImageIdentifier: imageID})
	must(err)
	err = NewMicrovmImageDeletedWaiter(c, func(o *MicrovmImageDeletedWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		Wait(ctx, &GetMicrovmImageInput{ImageIdentifier: imageID}, maxWait)
	must(err)
	_, err = c.GetMicrovmImage(ctx, &GetMicrovmImageInput{ImageIdentifier: imageID})
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("GetMicrovmImage after delete: %v", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var missing []string
	for _, op := range operations(t) {
		if rec.ops[op] == 0 {
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 || len(rec.ops) != 24 {
		t.Fatalf("operations not driven: %v (driven: %v)", missing, rec.ops)
	}
}

// Catches: an exact-name lookup that trusts nameFilter (a substring match)
// or stops at an empty or short page.
func TestFindMicrovmImageReadsEveryPage(t *testing.T) {
	c, _ := newEmulatorClient(t, emulator.Options{})
	ctx := ctxT(t)
	for _, n := range []string{"web-2", "web-3", "webapp", "web"} {
		if _, err := c.CreateMicrovmImage(ctx, &CreateMicrovmImageInput{Name: aws.String(n), BaseImageArn: aws.String("arn:aws:lambda:us-east-1:aws:microvm-image:" + taxonomy.ManagedBaseImage),
			BuildRoleArn: aws.String("arn:aws:iam::123456789012:role/build"), CodeArtifact: &types.CodeArtifactMemberUri{Value: "s3://b/" + n}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindMicrovmImage(ctx, c, "web", func(o *Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			// One item per page, so the match is on a later page.
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("PageSizeOne", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				in.Parameters.(*ListMicrovmImagesInput).MaxResults = aws.Int32(1)
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
		})
	})
	if err != nil || got == nil || *got.Name != "web" {
		t.Fatalf("FindMicrovmImage(web) = %v, %v", got, err)
	}
	if got, err := FindMicrovmImage(ctx, c, "we", nil...); err != nil || got != nil {
		t.Fatalf("FindMicrovmImage(we) = %v, %v; no image is named exactly that", got, err)
	}
}

// Catches: a failed build's reason looked for on the image or version (which
// carry none) instead of the builds.
func TestFailedBuildsCarryTheReason(t *testing.T) {
	c, _ := newEmulatorClient(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{FailReason: "Validate hook returned 500"} }})
	ctx := ctxT(t)
	created, err := c.CreateMicrovmImage(ctx, &CreateMicrovmImageInput{Name: aws.String("broken"), BaseImageArn: aws.String("arn:aws:lambda:us-east-1:aws:microvm-image:" + taxonomy.ManagedBaseImage),
		BuildRoleArn: aws.String("arn:aws:iam::123456789012:role/build"), CodeArtifact: &types.CodeArtifactMemberUri{Value: "s3://b/broken"}})
	if err != nil {
		t.Fatal(err)
	}
	err = NewMicrovmImageAvailableWaiter(c, func(o *MicrovmImageAvailableWaiterOptions) { fastDelays(&o.MinDelay, &o.MaxDelay) }).
		Wait(ctx, &GetMicrovmImageInput{ImageIdentifier: created.ImageArn}, 20*time.Second)
	var wf *WaiterFailureError
	if !errors.As(err, &wf) || wf.State != string(types.MicrovmImageStateCreateFailed) {
		t.Fatalf("want the waiter to fail on CREATE_FAILED, got %v", err)
	}
	builds, err := FailedBuilds(ctx, c, *created.ImageArn, *created.ImageVersion)
	if err != nil || len(builds) == 0 || builds[0].StateReason == nil || *builds[0].StateReason != "Validate hook returned 500" {
		t.Fatalf("FailedBuilds = %+v, %v", builds, err)
	}
}
