package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator/embedded"
)

// ttiForkBucket is the emulator bucket BenchmarkTTI's fork row keeps its
// checkpoints in.
const ttiForkBucket = "tti-checkpoints"

// ttiFork is fork → first output: checkpoint.Fork of a source sandbox
// holding a small project (200 files) into one copy, the clock started
// before the checkpoint and stopped at the copy's echo output, i.e. what
// a best-of-N harness waits for per attempt.
func ttiFork(b *testing.B, ctx context.Context, emu *embedded.Emulator, runs int) ttiRow {
	row := ttiRow{name: "Go fork n=1"}
	src, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
	if res, err := src.Run(ctx, []string{"sh", "-c", "mkdir -p /tmp/proj && for i in $(seq 1 200); do echo $i > /tmp/proj/f$i; done"}, client.RunOptions{}); err != nil || res.ExitStatus != 0 {
		b.Fatalf("setting up the fork's source: %v %+v", err, res)
	}
	store := &checkpoint.Store{
		S3:     s3.New(s3.Options{Region: emu.Region().String(), BaseEndpoint: aws.String(emu.URL), UsePathStyle: true, Credentials: embedded.Credentials()}),
		Bucket: ttiForkBucket, TempDir: b.TempDir(),
	}
	for range runs {
		row.attempts++
		var d time.Duration
		var out string
		t0 := time.Now()
		_, rep, err := checkpoint.Fork(ctx, src, store, 1, checkpoint.ForkOptions{
			Checkpoint: checkpoint.Options{Paths: []string{"/tmp/proj"}},
			Fleet:      sandbox.FleetOptions{Parallel: 1, Launch: emu.Launch},
		}, func(ctx context.Context, _ int, sb *sandbox.Sandbox) (client.Result, error) {
			res, err := sb.Run(ctx, ttiEcho, client.RunOptions{})
			d, out = time.Since(t0), res.Stdout
			return res, err
		})
		if err == nil {
			if f := rep.Failed(); len(f) != 0 {
				err = f[0].Err
			}
		}
		if err == nil && out != "hi\n" {
			err = fmt.Errorf("echo printed %q", out)
		}
		if err != nil {
			row.errs = append(row.errs, err.Error())
			continue
		}
		row.ok++
		row.tti = append(row.tti, d)
	}
	return row
}
