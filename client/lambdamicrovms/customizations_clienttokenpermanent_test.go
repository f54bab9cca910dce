package lambdamicrovms

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

func createForBuildWait(t *testing.T, c *Client, name string) *CreateMicrovmImageOutput {
	t.Helper()
	created, err := c.CreateMicrovmImage(ctxT(t), &CreateMicrovmImageInput{Name: aws.String(name),
		BaseImageArn: aws.String("arn:aws:lambda:us-east-1:aws:microvm-image:" + taxonomy.ManagedBaseImage),
		BuildRoleArn: aws.String("arn:aws:iam::123456789012:role/build"), CodeArtifact: &types.CodeArtifactMemberUri{Value: "s3://b/" + name}})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitBuild runs the image waiter with ImageBuildRetryable, counting polls.
func waitBuild(t *testing.T, c *Client, created *CreateMicrovmImageOutput, grace time.Duration, polls *int) error {
	decide := ImageBuildRetryable(c, *created.ImageVersion, grace)
	return NewMicrovmImageAvailableWaiter(c, func(o *MicrovmImageAvailableWaiterOptions) {
		fastDelays(&o.MinDelay, &o.MaxDelay)
		o.Retryable = func(ctx context.Context, in *GetMicrovmImageInput, out *GetMicrovmImageOutput, err error) (bool, error) {
			*polls++
			return decide(ctx, in, out, err)
		}
	}).Wait(ctxT(t), &GetMicrovmImageInput{ImageIdentifier: created.ImageArn}, 20*time.Second)
}

// Catches the wedge check dropped (the waiter would poll a wedged image,
// every build PENDING, for its whole budget) or run before the grace period
// is over, and a wedge not reported as the clientToken finding's
// WedgedBuildError.
func TestImageBuildRetryableFailsAWedgeAfterTheGrace(t *testing.T) {
	c, _ := newEmulatorClient(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Wedge: true} }})
	created := createForBuildWait(t, c, "wedge")
	var polls int
	err := waitBuild(t, c, created, time.Nanosecond, &polls)
	var we *WedgedBuildError
	if !errors.As(err, &we) || we.Builds == 0 || we.Version != *created.ImageVersion || !strings.Contains(err.Error(), taxonomy.FindingClientTokenPermanent.Title()) {
		t.Fatalf("want a WedgedBuildError naming the finding, got %v", err)
	}
	if polls != 1 {
		t.Fatalf("wedge detected after %d polls; it should fail on the first poll past the grace period", polls)
	}

	// Within the grace period the same image is polled on, to the budget.
	polls = 0
	decide := ImageBuildRetryable(c, *created.ImageVersion, time.Hour)
	err = NewMicrovmImageAvailableWaiter(c, func(o *MicrovmImageAvailableWaiterOptions) {
		fastDelays(&o.MinDelay, &o.MaxDelay)
		o.Retryable = decide
	}).Wait(ctxT(t), &GetMicrovmImageInput{ImageIdentifier: created.ImageArn}, 100*time.Millisecond)
	if err == nil || errors.As(err, &we) {
		t.Fatalf("within the grace period: got %v, want the wait to run out its budget", err)
	}
}

// Catches a grace check that fires on a healthy build (testing "no build
// SUCCESSFUL" instead of "every build PENDING").
func TestImageBuildRetryableLetsAHealthyBuildFinish(t *testing.T) {
	c, _ := newEmulatorClient(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Steps: 3} }})
	created := createForBuildWait(t, c, "healthy")
	var polls int
	if err := waitBuild(t, c, created, time.Nanosecond, &polls); err != nil {
		t.Fatal(err)
	}
}

// Catches the reason read from the image or the version (both carry none)
// instead of the builds, or only one of the version's builds reported.
func TestImageBuildRetryableReadsEveryBuildsReason(t *testing.T) {
	const reason = "The container image build failed."
	c, _ := newEmulatorClient(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{FailReason: reason} }})
	created := createForBuildWait(t, c, "broken")
	var polls int
	err := waitBuild(t, c, created, 0, &polls)
	var bf *BuildFailedError
	if !errors.As(err, &bf) || len(bf.Builds) != 2 || bf.Name != "broken" {
		t.Fatalf("want a BuildFailedError with both chipset builds, got %v", err)
	}
	if strings.Count(err.Error(), reason) != 2 || !strings.Contains(err.Error(), taxonomy.BuildLogGroupPrefix+"broken") {
		t.Fatalf("each build's reason and the log group should be reported: %v", err)
	}
}

// Catches an update's wait ended by the version before it: a ready image
// whose latest active version is not the awaited one is polled again.
func TestImageBuildRetryableWaitsForItsOwnVersion(t *testing.T) {
	decide := ImageBuildRetryable(nil, "2", 0)
	in := &GetMicrovmImageInput{ImageIdentifier: aws.String("arn:aws:lambda:us-east-1:123456789012:microvm-image:x")}
	for v, wantRetry := range map[string]bool{"1": true, "2": false} {
		retry, err := decide(ctxT(t), in, &GetMicrovmImageOutput{State: types.MicrovmImageStateUpdated, LatestActiveImageVersion: aws.String(v)}, nil)
		if err != nil || retry != wantRetry {
			t.Fatalf("UPDATED at version %s: retry=%v err=%v, want retry=%v", v, retry, err, wantRetry)
		}
	}
}

// Catches an image with no builds listed yet called wedged
// (`len(builds) >= 0`): "every build PENDING" says nothing when there are
// none, so the wait goes on. A stand-in on 127.0.0.1 answers CREATING with
// no builds for three polls, then CREATED.
func TestImageBuildRetryableWithNoBuildsListedYetWaitsOn(t *testing.T) {
	var mu sync.Mutex
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/builds") {
			_, _ = w.Write([]byte(`{"items":[]}`))
			return
		}
		mu.Lock()
		polls++
		state := "CREATING"
		if polls > 3 {
			state = "CREATED"
		}
		mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"imageArn":"arn:aws:lambda:us-east-1:123456789012:microvm-image:fresh","name":"fresh","state":%q,"createdAt":1.7e9}`, state)
	}))
	t.Cleanup(srv.Close)
	c := testClient(srv.URL)
	var n int
	err := waitBuild(t, c, &CreateMicrovmImageOutput{ImageArn: aws.String("arn:aws:lambda:us-east-1:123456789012:microvm-image:fresh"), ImageVersion: aws.String("1.0")}, time.Nanosecond, &n)
	if err != nil || n != 4 {
		t.Fatalf("after %d polls: %v; want CREATED on the 4th", n, err)
	}
}
