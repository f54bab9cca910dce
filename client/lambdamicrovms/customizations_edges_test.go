package lambdamicrovms

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: the endpoint token's ceiling made exclusive (`n <= max` made
// `<`, refusing a token of exactly the measured ceiling).
func TestTokenOfExactlyTheCeilingIsAllowed(t *testing.T) {
	at := func(n int32) error {
		return checkTraps(&CreateMicrovmAuthTokenInput{ExpirationInMinutes: aws.Int32(n)})
	}
	if err := at(taxonomy.MaxAuthTokenMinutes); err != nil {
		t.Fatalf("exactly the ceiling refused: %v", err)
	}
	var r *RefusalError
	if err := at(taxonomy.MaxAuthTokenMinutes + 1); !errors.As(err, &r) || r.Finding != taxonomy.FindingEndpointAuth {
		t.Fatalf("one past the ceiling: %v", err)
	}
}

// Catches: the run-hook payload's byte ceiling made exclusive, or the bytes
// to trim computed as len+ceiling (the refusal would tell the caller to
// trim more than the whole payload).
func TestRunHookPayloadCeilingAndWhatToTrim(t *testing.T) {
	at := func(n int) error {
		return checkTraps(&RunMicrovmInput{RunHookPayload: aws.String(strings.Repeat("a", n))})
	}
	if err := at(taxonomy.MaxRunHookPayloadBytes); err != nil {
		t.Fatalf("exactly the ceiling refused: %v", err)
	}
	var r *RefusalError
	if err := at(taxonomy.MaxRunHookPayloadBytes + 3); !errors.As(err, &r) || !strings.Contains(r.Reason, "trim 3 bytes") {
		t.Fatalf("three past the ceiling: %v", err)
	}
}

// Catches: a zero grace kept as zero instead of DefaultWedgeGrace
// (`grace <= 0` made `< 0`): every image whose builds are still PENDING at
// the first poll would be called wedged at once.
func TestZeroWedgeGraceMeansTheDefault(t *testing.T) {
	c, _ := newEmulatorClient(t, emulator.Options{Builds: func(string) emulator.BuildPlan { return emulator.BuildPlan{Wedge: true} }})
	created := createForBuildWait(t, c, "zero-grace")
	decide := ImageBuildRetryable(c, *created.ImageVersion, 0)
	err := NewMicrovmImageAvailableWaiter(c, func(o *MicrovmImageAvailableWaiterOptions) {
		fastDelays(&o.MinDelay, &o.MaxDelay)
		o.Retryable = decide
	}).Wait(ctxT(t), &GetMicrovmImageInput{ImageIdentifier: created.ImageArn}, 100*time.Millisecond)
	var we *WedgedBuildError
	if err == nil || errors.As(err, &we) {
		t.Fatalf("grace 0 (the default, %v): got %v, want the wait to run out its budget", DefaultWedgeGrace, err)
	}
}

// Catches: the version a failed image names ignored
// (`LatestFailedImageVersion != nil` negated): the builds of the awaited
// version would be read and reported instead of the version that failed.
// A stand-in on 127.0.0.1 answers CREATE_FAILED naming version 2.0 while
// the caller waits for 1.0.
func TestFailedImageReportsTheVersionTheServiceNames(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/builds") {
			mu.Lock()
			asked = append(asked, r.URL.Path)
			mu.Unlock()
			_, _ = w.Write([]byte(`{"items":[]}`))
			return
		}
		_, _ = fmt.Fprint(w, `{"imageArn":"arn:aws:lambda:us-east-1:123456789012:microvm-image:x","name":"x","state":"CREATE_FAILED","latestFailedImageVersion":"2.0","createdAt":1.7e9}`)
	}))
	t.Cleanup(srv.Close)
	c := testClient(srv.URL)
	var n int
	err := waitBuild(t, c, &CreateMicrovmImageOutput{ImageArn: aws.String("arn:aws:lambda:us-east-1:123456789012:microvm-image:x"), ImageVersion: aws.String("1.0")}, time.Hour, &n)
	var bf *BuildFailedError
	if !errors.As(err, &bf) || bf.Version != "2.0" {
		t.Fatalf("want a BuildFailedError for version 2.0, got %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || !strings.Contains(asked[0], "/versions/2.0/builds") {
		t.Fatalf("builds listed at %v, want version 2.0's", asked)
	}
}
