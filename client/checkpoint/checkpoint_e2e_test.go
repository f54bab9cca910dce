package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
	"github.com/microvms/microvms/localvm"
)

func TestMain(m *testing.M) {
	localvm.Init() // this test binary is also every local guest's init
	bin, err := testbin.Build("cmd/agentd", testbin.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(embedded.AgentdEnv, bin)
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

const bucket = "checkpoints"

// env is a real emulator (guests are real agentd processes in their own
// namespaces) and a Store on its S3 slice over the AWS wire.
type env struct {
	emu   *embedded.Emulator
	store *Store
}

func newEnv(t testing.TB) *env {
	t.Helper()
	if err := emulator.CheckIsolation(); err != nil {
		t.Skipf("this host cannot confine a guest: %v", err)
	}
	emu, err := embedded.Start(context.Background(), embedded.Options{Buckets: []string{bucket}, NoPull: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(emu.URL), UsePathStyle: true, Credentials: embedded.Credentials()})
	return &env{emu: emu, store: &Store{S3: s3c, Bucket: bucket, TempDir: t.TempDir()}}
}

func (e *env) launch(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	sb, err := e.emu.Launch(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Terminate(context.Background(), sandbox.TeardownOptions{}) })
	return sb
}

// runE is run for a fleet's task goroutine, which must not call t.Fatal.
func runE(sb *sandbox.Sandbox, script string) (string, error) {
	res, err := sb.Run(context.Background(), []string{"sh", "-c", script}, client.RunOptions{})
	if err != nil {
		return "", err
	}
	if res.ExitStatus != 0 {
		return "", fmt.Errorf("%q exited %d: %s%s", script, res.ExitStatus, res.Stdout, res.Stderr)
	}
	return res.Stdout, nil
}

func run(t testing.TB, sb *sandbox.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Run(context.Background(), []string{"sh", "-c", script}, client.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 0 {
		t.Fatalf("%q exited %d: %s%s", script, res.ExitStatus, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// project is a tree with one of every kind a checkpoint carries.
const project = `set -e
mkdir -p /tmp/proj/src /tmp/proj/empty /tmp/proj/bin /tmp/proj/deep/a/b
printf 'hello\n' > /tmp/proj/src/a.txt
ln /tmp/proj/src/a.txt /tmp/proj/src/a-hard
printf '#!/bin/sh\necho tool\n' > /tmp/proj/bin/tool
chmod 4755 /tmp/proj/bin/tool
chmod 0640 /tmp/proj/src/a.txt
chmod 0777 /tmp/proj/deep/a
chmod 1777 /tmp/proj/deep/a/b
ln -s ../src/a.txt /tmp/proj/bin/rel-link
ln -s /etc/passwd /tmp/proj/bin/abs-link
truncate -s 64M /tmp/proj/sparse.img
printf 'middle' | dd of=/tmp/proj/sparse.img bs=1 seek=33554432 conv=notrunc 2>/dev/null
chown 1000:1001 /tmp/proj/src/a.txt /tmp/proj/empty
chown -h 1002:1003 /tmp/proj/bin/rel-link
touch -d @1700000000.123456789 /tmp/proj/src/a.txt
touch -d @1600000000 /tmp/proj/sparse.img /tmp/proj/bin/tool
touch -h -d @1500000000 /tmp/proj/bin/rel-link /tmp/proj/bin/abs-link
chmod 0700 /tmp/proj/empty
touch -d @1400000000 /tmp/proj/empty /tmp/proj/deep/a/b /tmp/proj/deep/a /tmp/proj/deep /tmp/proj/src /tmp/proj/bin /tmp/proj
`

// describe is everything a checkpoint promises about /tmp/proj, one line a
// member: type, mode, owner, mtime (ns), size, link count, target, content
// digest; then the inode pairing of the hard links and the sparse file's
// allocation.
const describe = `cd /tmp/proj && find . -printf '%p %y %m %U:%G %T@ %s %n %l\n' | sort
find . -type f -exec sha256sum {} + | sort
[ "$(stat -c %i src/a.txt)" = "$(stat -c %i src/a-hard)" ] && echo hardlinked
echo sparse-kib $(du -k sparse.img | cut -f1)
`

func sparseKiB(t testing.TB, listing string) int {
	t.Helper()
	i := strings.Index(listing, "sparse-kib ")
	if i < 0 {
		t.Fatalf("no sparse line in %s", listing)
	}
	n, err := strconv.Atoi(strings.TrimSpace(listing[i+len("sparse-kib "):]))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The done-when: a project of every kind (a 64 MiB sparse file and
// a hard-link pair among them) is checkpointed and forked into 4; each fork
// sees the same tree byte for byte and metadata for metadata, diverges
// without touching the others or the original, and the original (with a
// command running through the checkpoint) keeps running.
func TestForkCarriesEveryKindAndForksDiverge(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	orig := e.launch(t)
	run(t, orig, project)
	want := run(t, orig, describe)
	if !strings.Contains(want, "hardlinked") || sparseKiB(t, want) > 1024 {
		t.Fatalf("the fixture is not what the test needs:\n%s", want)
	}
	bg, err := orig.Session().Start(ctx, []string{"sleep", "600"}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var arrived int
	allWritten := make(chan struct{})
	const n = 4
	m, rep, err := Fork(ctx, orig, e.store, n, ForkOptions{
		Checkpoint: Options{Paths: []string{"/tmp/proj"}, Name: "proj", Labels: map[string]string{"suite": "e2e"}},
		Fleet:      sandbox.FleetOptions{Parallel: n, Launch: e.emu.Launch},
	}, func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
		got, err := runE(sb, describe)
		if err != nil {
			return client.Result{}, err
		}
		if got != want {
			return client.Result{}, fmt.Errorf("fork %d sees another tree:\n%s\nwant:\n%s", i, got, want)
		}
		mine := fmt.Sprintf("fork %d\n", i)
		if _, err := runE(sb, fmt.Sprintf("printf '%s' > /tmp/proj/src/a.txt && echo %d > /tmp/proj/only-%d", strings.TrimSuffix(mine, "\n")+`\n`, i, i)); err != nil {
			return client.Result{}, err
		}
		mu.Lock()
		arrived++
		if arrived == n {
			close(allWritten)
		}
		mu.Unlock()
		select { // every fork has written before any reads back
		case <-allWritten:
		case <-time.After(2 * time.Minute):
			return client.Result{}, errors.New("the other forks never wrote")
		}
		if b, err := sb.ReadFile(ctx, "/tmp/proj/src/a-hard"); err != nil || string(b) != mine {
			return client.Result{}, fmt.Errorf("fork %d reads %q through its hard link, want %q (%v)", i, b, mine, err)
		}
		others, err := runE(sb, "ls /tmp/proj | grep -c '^only-' || true")
		if err != nil {
			return client.Result{}, err
		}
		if strings.TrimSpace(others) != "1" {
			return client.Result{}, fmt.Errorf("fork %d sees %s only-* markers, want its own alone", i, others)
		}
		return client.Result{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Outcomes {
		if o.Err != nil {
			t.Errorf("fork %d: %v", o.Index, o.Err)
		}
		if o.MicrovmID == "" || o.MicrovmID == orig.ID() {
			t.Errorf("fork %d ran in %q", o.Index, o.MicrovmID)
		}
	}
	if len(rep.Leaked()) != 0 {
		t.Errorf("leaked: %v", rep.Leaked())
	}
	if !m.WritersPaused || m.Files < 12 || m.Size > 1<<20 || m.TreeBytes < 64<<20 || m.Name != "proj" || len(m.Labels) != 1 {
		t.Errorf("manifest %+v", m)
	}
	// The original: untouched by any fork, still running, its command
	// continued after the pause.
	if got := run(t, orig, describe); got != want {
		t.Errorf("the original changed:\n%s", got)
	}
	if r, err := bg.Poll(ctx); err != nil || r.Phase != protocol.PhaseRunning {
		t.Errorf("the original's command is %v (%v), want still running", r.Phase, err)
	}
	if st := run(t, orig, "ps -o stat= -p "+fmt.Sprint(execPid(t, orig, bg.ID()))); strings.HasPrefix(strings.TrimSpace(st), "T") {
		t.Errorf("the original's command was left stopped: %q", st)
	}
	// One cost report prices the fleet.
	if _, err := rep.Cost(ctx, cost.Pinned(e.emu.Region()), "fork"); err != nil {
		t.Errorf("the fork's one cost report: %v", err)
	}
}

func execPid(t testing.TB, sb *sandbox.Sandbox, id string) int32 {
	t.Helper()
	xs, err := sb.Session().Execs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		if x.ExecID == id {
			return x.Pid
		}
	}
	t.Fatalf("no exec %s", id)
	return 0
}

func refusal(t *testing.T, err error, want Reason) {
	t.Helper()
	var re *RefusalError
	var ce *client.Error
	if !errors.As(err, &re) || re.Reason != want || !errors.As(err, &ce) || ce.Kind() != taxonomy.KindCheckpointRefused {
		t.Fatalf("err = %v, want a %s refusal of kind CheckpointRefused", err, want)
	}
}

func microvms(t *testing.T, e *env) int {
	t.Helper()
	c, err := e.emu.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l, err := sandbox.List(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return len(l)
}

// Corrupted, truncated and foreign objects, and another image version, are
// refused before anything is launched, so no file of them is written
// anywhere.
func TestRestoreRefusesBeforeAnyFileLands(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	orig := e.launch(t)
	run(t, orig, "mkdir -p /tmp/w && echo data > /tmp/w/f")
	m, err := Checkpoint(ctx, orig, e.store, Options{Paths: []string{"/tmp/w"}, Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	key := e.store.objectKey(m.Digest)
	good, ok := e.emu.Server.Object(bucket, key)
	if !ok {
		t.Fatalf("no object at %s", key)
	}
	put := func(k string, b []byte) {
		if _, err := e.store.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader(b)}); err != nil {
			t.Fatal(err)
		}
	}
	before := microvms(t, e)
	restore := func(o RestoreOptions) error {
		o.Launch = e.emu.Launch
		sb, err := Restore(ctx, e.store, "w", o)
		if sb != nil {
			sb.Terminate(ctx, sandbox.TeardownOptions{})
		}
		return err
	}

	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0xff
	put(key, bad)
	refusal(t, restore(RestoreOptions{}), ReasonCorrupted)

	put(key, good[:len(good)-1])
	refusal(t, restore(RestoreOptions{}), ReasonTruncated)

	put(key, good)
	refusal(t, restore(RestoreOptions{Options: sandbox.Options{Version: m.ImageVersion + "-other"}}), ReasonOtherVersion)

	// Foreign: bytes whose digest and length the manifest matches, but no
	// checkpoint archive.
	junk := []byte("not a zstd tar at all, but hashed honestly")
	fm := m
	fm.Name = "foreign"
	fm.Digest, fm.Size = digestOf(junk), int64(len(junk))
	put(e.store.objectKey(fm.Digest), junk)
	if err := e.store.putManifest(ctx, fm); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(ctx, e.store, "foreign", RestoreOptions{Launch: e.emu.Launch})
	refusal(t, err, ReasonForeign)

	if after := microvms(t, e); after != before {
		t.Fatalf("%d MicroVMs after the refusals, %d before: a refused restore launched", after, before)
	}
	// And the good object restores.
	sb, err := Restore(ctx, e.store, "w", RestoreOptions{Launch: e.emu.Launch})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
	if b, err := sb.ReadFile(ctx, "/tmp/w/f"); err != nil || string(b) != "data\n" {
		t.Fatalf("restored /tmp/w/f = %q, %v", b, err)
	}
}

// A checkpoint that fails mid-stream, or whose object upload fails,
// leaves no manifest (nor, mid-stream, any object).
func TestFailedCheckpointLeavesNoManifest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.launch(t)
	run(t, sb, "mkdir -p /tmp/w && head -c 4000000 /dev/urandom > /tmp/w/big")

	small := *e.store
	small.MaxObjectBytes = 64 << 10
	if _, err := Checkpoint(ctx, sb, &small, Options{Paths: []string{"/tmp/w"}, Name: "cut"}); err == nil {
		t.Fatal("a checkpoint over MaxObjectBytes succeeded")
	}
	e.emu.Server.Inject("PutObject", emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal)
	e.emu.Server.Inject("UploadPart", emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal)
	if _, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/w"}, Name: "failed-upload"}); err == nil {
		t.Fatal("a checkpoint whose upload failed succeeded")
	}
	// The bytes are up, under the staging key, but the copy to the digest's
	// key fails: the staging object goes too.
	e.emu.Server.Inject("CopyObject", emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal, emulator.FaultInternal)
	if _, err := Checkpoint(ctx, sb, e.store, Options{Paths: []string{"/tmp/w"}, Name: "failed-copy"}); err == nil {
		t.Fatal("a checkpoint whose copy failed succeeded")
	}
	list, err := e.store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("failed checkpoints left manifests: %+v", list)
	}
	out, err := e.store.S3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out.Contents {
		t.Errorf("left behind: %s", aws.ToString(o.Key))
	}
}
