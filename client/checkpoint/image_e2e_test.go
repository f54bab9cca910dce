package checkpoint

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testimage"
)

// bakeEnv is a real emulator that builds Dockerfiles on a small base image
// (internal/testimage), with a source image built by client/build from an
// artifact in the emulator's S3 slice: what a bake starts from.
type bakeEnv struct {
	env
	control *lambdamicrovms.Client
	source  *build.Result
}

func hostMachine() elf.Machine {
	if runtime.GOARCH == "arm64" {
		return elf.EM_AARCH64
	}
	return elf.EM_X86_64
}

func newBakeEnv(t testing.TB) *bakeEnv {
	t.Helper()
	return newBakeEnvOn(t, testimage.Base(t, false))
}

// newBakeEnvOn is newBakeEnv on an emulator whose base image for FROM is
// base ("" for none: it then performs no Dockerfile step).
func newBakeEnvOn(t testing.TB, base string) *bakeEnv {
	t.Helper()
	if err := emulator.CheckIsolation(); err != nil {
		t.Skipf("this host cannot confine a guest: %v", err)
	}
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{Buckets: []string{bucket}, BaseImage: base, BuildCache: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(emu.URL), UsePathStyle: true, Credentials: embedded.Credentials()})
	control, err := emu.Control(ctx)
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := os.ReadFile(os.Getenv(embedded.AgentdEnv))
	if err != nil {
		t.Fatal(err)
	}
	df, err := build.Dockerfile(build.DockerfileOptions{Workdir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	// The test base has no chmod: the COPY sets the daemon's mode itself.
	df = strings.Replace(df, "COPY agentd /agentd\nRUN chmod 0755 /agentd\n", "COPY --chmod=0755 agentd /agentd\n", 1)
	src, err := build.Build(ctx, control, build.NewS3Uploader(s3c, bucket), build.Spec{
		Daemon: daemon, Machine: hostMachine(), Dockerfile: df, Workdir: "/work", Name: "source",
		BuildRoleARN: "arn:aws:iam::123456789012:role/build", Wait: emu.Wait(2 * time.Minute),
	})
	if err != nil {
		t.Fatalf("building the source image: %v", err)
	}
	return &bakeEnv{env: env{emu: emu, store: &Store{S3: s3c, Bucket: bucket, TempDir: t.TempDir()}}, control: control, source: src}
}

// state is what the source sandbox leaves in /work/state before the
// checkpoint; the base image has sh, mkdir, cat, chown and stat only.
const state = `set -e
mkdir -p /work/state/sub /work/state/empty
echo baked > /work/state/sub/f
echo mine > /work/state/owned
chown 1000:1000 /work/state/owned
`

// Catches: a baked image whose launches lack the checkpoint's files (the
// ADD missing or misplaced, the tar still zstd), one that loses their
// owners, and one built on something other than the source's artifact
// (the daemon, the workdir and its other files gone).
func TestBakedImageLaunchesWithTheFiles(t *testing.T) {
	e := newBakeEnv(t)
	ctx := context.Background()
	sb, err := e.emu.Launch(ctx, sandbox.Options{Image: e.source.ImageARN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), teardown) })
	run(t, sb, state)
	m, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/work/state"}, Name: "baked"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := BakeImage(ctx, e.store, "baked", BakeOptions{Control: e.control, Wait: e.emu.Wait(2 * time.Minute)})
	if err != nil {
		t.Fatalf("BakeImage: %v\nbuild log: %s", err, strings.Join(e.emu.Server.LogLines(build.LogGroup("source-"+strings.TrimPrefix(m.Digest, "sha256:")[:12])), "\n"))
	}
	if b.Name != "source-"+strings.TrimPrefix(m.Digest, "sha256:")[:12] || b.Version == "" || b.Checkpoint.Digest != m.Digest {
		t.Fatalf("Baked = %+v", b)
	}
	for i := range 2 {
		nb, err := e.emu.Launch(ctx, sandbox.Options{Image: b.ImageARN})
		if err != nil {
			t.Fatal(err)
		}
		got := run(t, nb, "pwd; cat /work/state/sub/f; stat -c %u:%g /work/state/owned; ls -d /work/state/empty")
		nb.Terminate(ctx, teardown)
		if got != "/work\nbaked\n1000:1000\n/work/state/empty\n" {
			t.Fatalf("launch %d of the baked image sees %q", i, got)
		}
	}
	if _, err := BakeImage(ctx, e.store, "baked", BakeOptions{Control: e.control, Wait: e.emu.Wait(time.Minute)}); err == nil {
		t.Fatal("a second bake under the same name was not refused")
	}
}

// Catches: an emulator with no base image for FROM handing back a baked
// image that performed no ADD (every launch without the checkpoint's
// files, found only when a command fails), or leaving that image behind.
func TestBakeOnAnEmulatorWithoutABaseIsRefusedAndRemoved(t *testing.T) {
	e := newBakeEnvOn(t, "")
	ctx := context.Background()
	sb, err := e.emu.Launch(ctx, sandbox.Options{Image: e.source.ImageARN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), teardown) })
	run(t, sb, "mkdir -p /work/state && echo baked > /work/state/f")
	if _, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/work/state"}, Name: "unbaked"}); err != nil {
		t.Fatal(err)
	}
	b, err := BakeImage(ctx, e.store, "unbaked", BakeOptions{Control: e.control, Name: "unbaked-image", Wait: e.emu.Wait(2 * time.Minute)})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindPrecondition || ce.Finding() != taxonomy.FindingNoUserSnapshot || !strings.Contains(err.Error(), "--base-image") || !strings.Contains(err.Error(), "ADD") {
		t.Fatalf("BakeImage = %+v, %v; want ERR_PRECONDITION (no-user-snapshot) naming the ADD and --base-image", b, err)
	}
	if _, gerr := e.control.GetMicrovmImage(ctx, &lambdamicrovms.GetMicrovmImageInput{ImageIdentifier: aws.String("unbaked-image")}); gerr == nil {
		t.Fatal("the image baked without its files was left behind")
	}
	bkt, key, _ := strings.Cut(strings.TrimPrefix(b.ArtifactURI, "s3://"), "/")
	if _, herr := e.store.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bkt), Key: aws.String(key)}); b.ArtifactURI == "" || herr == nil {
		t.Fatalf("the refused bake's artifact %q was left behind", b.ArtifactURI)
	}
}
