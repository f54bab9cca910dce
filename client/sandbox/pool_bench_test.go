package sandbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
)

// BenchmarkPoolAcquire times, in the same run on the local emulator, a
// sandbox from a warm pool (Acquire, which resumes a suspended member, to
// the first exec's result) beside a cold one (Launch to the first exec's
// result), and reports the p50 and p99 of each in milliseconds and the
// ratio of the medians. The issue asks for acquire at least 5x faster than
// launch (issue 37), so a run below that fails. Teardown and the pool's
// refill happen outside the timed spans: the pool is full again before
// every acquire, as it is for a tenant who arrives at a steady rate.
//
//	go test ./client/sandbox/ -run '^$' -bench BenchmarkPoolAcquire -benchtime 50x
func BenchmarkPoolAcquire(b *testing.B) {
	ctx := context.Background()
	emu := startEmbedded(b)
	pool, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 2, Launch: emu.Launch})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close(ctx)
	first := []string{"true"}
	var acquire, launch []time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if err := pool.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		t0 := time.Now()
		sb, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Run(ctx, first, client.RunOptions{}); err != nil {
			b.Fatal(err)
		}
		acquire = append(acquire, time.Since(t0))
		b.StopTimer()
		pool.Release(ctx, sb)
		b.StartTimer()

		t0 = time.Now()
		cold, err := emu.Launch(ctx, sandbox.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cold.Run(ctx, first, client.RunOptions{}); err != nil {
			b.Fatal(err)
		}
		launch = append(launch, time.Since(t0))
		b.StopTimer()
		cold.Terminate(ctx, sandbox.TeardownOptions{})
		b.StartTimer()
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	a50, a99 := percentile(acquire, 50), percentile(acquire, 99)
	l50, l99 := percentile(launch, 50), percentile(launch, 99)
	b.ReportMetric(ms(a50), "acquire-p50-ms")
	b.ReportMetric(ms(a99), "acquire-p99-ms")
	b.ReportMetric(ms(l50), "launch-p50-ms")
	b.ReportMetric(ms(l99), "launch-p99-ms")
	ratio := float64(l50) / float64(a50)
	b.ReportMetric(ratio, "launch/acquire-p50")
	if len(acquire) >= 5 && ratio < 5 {
		b.Fatalf("acquire p50 %s is only %.1fx faster than launch p50 %s; the issue asks for 5x", a50, ratio, l50)
	}
}

// percentile is the nearest-rank p-th percentile of samples.
func percentile(samples []time.Duration, p int) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(rank, 1)-1]
}
