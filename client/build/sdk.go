package build

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/setupapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// CreateMicrovmImage and the build's wait, on client/lambdamicrovms. The SDK
// mints the clientToken (crypto/rand, one per call); its image waiter, with
// lambdamicrovms.ImageBuildRetryable, fails a wedged build after the grace
// period and reads a failed build's reason from the builds.

func hookState(on bool) types.HookState {
	if on {
		return types.HookStateEnabled
	}
	return types.HookStateDisabled
}

func runTimeout(t client.RunHookTimeout) *int32 {
	if t.IsZero() {
		return nil
	}
	return aws.Int32(int32(t.Seconds()))
}

func buildTimeout(t client.BuildHookTimeout) *int32 {
	if t.IsZero() {
		return nil
	}
	return aws.Int32(int32(t.Seconds()))
}

// createInput is the CreateMicrovmImage request of one build: every hook
// agentd serves enabled on s.Port, the build log group named explicitly (so
// the group teardown deletes is the group the build wrote to), arm64 only.
func createInput(region, name string, s Spec, artifactURI, logGroup string) (*lambdamicrovms.CreateMicrovmImageInput, error) {
	if s.Port < 1 || s.Port > 65535 {
		return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAgentPortAgreement, "hook port %d is outside 1..65535", s.Port)
	}
	in := &lambdamicrovms.CreateMicrovmImageInput{
		Name:              aws.String(name),
		BaseImageArn:      aws.String(cplane.ManagedBaseImageARN(region)),
		BuildRoleArn:      aws.String(s.BuildRoleARN),
		CodeArtifact:      &types.CodeArtifactMemberUri{Value: artifactURI},
		CpuConfigurations: []types.CpuConfiguration{{Architecture: types.ArchitectureArm64}},
		// The tag `microvm gc` knows this tool's images by (api/setup.yaml).
		Tags: map[string]string{setupapi.TagKey: setupapi.TagValue},
		Hooks: &types.Hooks{
			Port: aws.Int32(int32(s.Port)),
			// agentd serves every run-time hook; enabling them costs nothing
			// and lets the daemon see a suspend coming.
			MicrovmHooks: &types.MicrovmHooks{
				Run: hookState(true), RunTimeoutInSeconds: runTimeout(s.Run),
				Resume: hookState(true), ResumeTimeoutInSeconds: runTimeout(s.Run),
				Suspend: hookState(true), SuspendTimeoutInSeconds: runTimeout(s.Run),
				Terminate: hookState(true), TerminateTimeoutInSeconds: runTimeout(s.Run),
			},
			MicrovmImageHooks: &types.MicrovmImageHooks{
				Ready: hookState(true), ReadyTimeoutInSeconds: buildTimeout(s.Ready),
				Validate: hookState(true), ValidateTimeoutInSeconds: buildTimeout(s.Validate),
			},
		},
		Logging: &types.LoggingMemberCloudWatch{Value: types.CloudWatchLogging{LogGroup: aws.String(logGroup)}},
	}
	if s.BaseImageVersion != "" {
		if err := cplane.CheckManagedBaseVersion(s.BaseImageVersion); err != nil {
			return nil, err
		}
		in.BaseImageVersion = aws.String(s.BaseImageVersion)
	}
	if s.InternetEgress {
		in.EgressNetworkConnectors = []string{lambdamicrovms.ConnectorARN(region, "INTERNET_EGRESS")}
	}
	if !s.Size.IsZero() {
		in.Resources = []types.Resources{{MinimumMemoryInMiB: aws.Int32(int32(s.Size.BaselineMiB()))}}
	}
	if s.RepairIdentity {
		// sethostname and a bind mount need CAP_SYS_ADMIN, which only
		// additionalOsCapabilities=["ALL"] grants.
		in.AdditionalOsCapabilities = []types.Capability{types.CapabilityAll}
	}
	return in, nil
}

// waitBuilt waits for the build of version of image: polls start at once and
// back off from Interval (2 s when unset) to at most max(Interval, 10 s),
// within the context's deadline or Timeout (30 minutes when unset); Grace
// (10 minutes when unset) bounds how long every build may stay PENDING.
// Progress sees every poll.
func waitBuilt(ctx context.Context, api *lambdamicrovms.Client, image, version string, o cplane.WaitOptions) error {
	minDelay, budget := o.Interval, o.Timeout
	if minDelay <= 0 {
		minDelay = 2 * time.Second
	}
	if budget <= 0 {
		budget = 30 * time.Minute
	}
	if dl, ok := ctx.Deadline(); ok {
		budget = max(time.Until(dl), time.Millisecond)
	}
	decide := lambdamicrovms.ImageBuildRetryable(api, version, o.Grace)
	start, polls := time.Now(), 0
	err := lambdamicrovms.NewMicrovmImageAvailableWaiter(api, func(w *lambdamicrovms.MicrovmImageAvailableWaiterOptions) {
		w.MinDelay, w.MaxDelay = minDelay, max(minDelay, 10*time.Second)
		w.Retryable = func(ctx context.Context, in *lambdamicrovms.GetMicrovmImageInput, out *lambdamicrovms.GetMicrovmImageOutput, err error) (bool, error) {
			retry, derr := decide(ctx, in, out, err)
			if out != nil && err == nil && o.Progress != nil {
				polls++
				o.Progress(cplane.Progress{Poll: polls, State: string(out.State), Elapsed: time.Since(start)})
			}
			return retry, derr
		}
	}).Wait(ctx, &lambdamicrovms.GetMicrovmImageInput{ImageIdentifier: aws.String(image)}, budget)
	return cplane.SDKError("WaitImage "+image, err)
}
