package sandbox

import (
	"context"
	"fmt"
	"github.com/microvms/microvms/localvm"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
)

// The fixtures every walk test shares: a real agentd (or its arm64 build
// for the artifact), the emulator behind a control-plane client.

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
	localvm.Init() // this test binary is also every local guest's init
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
	cpURL  string // the emulator's control-plane endpoint
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
	cpURL, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := cplane.New(context.Background(), cplane.Options{Region: client.USEast1, Endpoint: cpURL, Credentials: creds, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{emu: emu, cpURL: cpURL, cp: c, s3objs: map[string][]byte{}, clock: &fakeClock{t: time.Unix(1_800_000_000, 0)}}
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
