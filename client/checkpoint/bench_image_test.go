package checkpoint

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/microvms/microvms/client/sandbox"
)

// BenchmarkBakedImage reports launch-to-first-command of a checkpoint
// baked into an image (launch, then a command reading a baked file) beside
// a restore of the same checkpoint (Restore's start to the same command:
// download, verify, launch, lay) and a plain launch of the source image, in
// the same run: p50 and max in milliseconds. The project is 200 small files
// and a 4 MiB random blob. The restore lands on the emulator's default
// image (its guests have chmod, touch and ln for the lay's fixups; the test
// base image has not), so AllowOtherVersion is set for it.
func BenchmarkBakedImage(b *testing.B) {
	e := newBakeEnv(b)
	ctx := context.Background()
	src, err := e.emu.Launch(ctx, sandbox.Options{Image: e.source.ImageARN})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Terminate(ctx, teardown)
	run(b, src, `mkdir -p /work/state/sub && i=0; while [ $i -lt 200 ]; do echo $i > /work/state/f$i; i=$((i+1)); done; echo baked > /work/state/sub/f`)
	blob := make([]byte, 4<<20)
	rand.Read(blob)
	if err := src.WriteFile(ctx, "/work/state/blob", blob, 0o644); err != nil {
		b.Fatal(err)
	}
	if _, err := Checkpoint(ctx, src, e.store, Options{Paths: []string{"/work/state"}, Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	baked, err := BakeImage(ctx, e.store, "bench", BakeOptions{Control: e.control, Wait: e.emu.Wait(5 * time.Minute)})
	if err != nil {
		b.Fatal(err)
	}
	plain, err := e.emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	plainARN, _, err := sandbox.ImageOf(ctx, plain)
	plain.Terminate(ctx, teardown)
	if err != nil {
		b.Fatal(err)
	}
	first := func(b *testing.B, sb *sandbox.Sandbox, t0 time.Time) time.Duration {
		if got := run(b, sb, "cat /work/state/sub/f"); got != "baked\n" {
			b.Fatalf("the first command read %q", got)
		}
		d := time.Since(t0)
		sb.Terminate(ctx, teardown)
		return d
	}
	b.Run("launch", func(b *testing.B) {
		var all []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			sb, err := e.emu.Launch(ctx, sandbox.Options{Image: e.source.ImageARN})
			if err != nil {
				b.Fatal(err)
			}
			run(b, sb, "true")
			all = append(all, time.Since(t0))
			sb.Terminate(ctx, teardown)
		}
		report(b, all)
	})
	b.Run("baked", func(b *testing.B) {
		var all []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			sb, err := e.emu.Launch(ctx, sandbox.Options{Image: baked.ImageARN})
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, first(b, sb, t0))
		}
		report(b, all)
	})
	b.Run("restore", func(b *testing.B) {
		var all []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			sb, err := Restore(ctx, e.store, "bench", RestoreOptions{Launch: e.emu.Launch, Options: sandbox.Options{Image: plainARN}, AllowOtherVersion: true})
			if err != nil {
				b.Fatal(err)
			}
			all = append(all, first(b, sb, t0))
		}
		report(b, all)
	})
}
