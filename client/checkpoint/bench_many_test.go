package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
)

// manyTimes is 2,000 small files in 20 directories, each file with a
// modification time of its own (as a tree written over minutes has): the
// case where the fallback's script runs one touch per distinct time.
const manyTimes = `set -e; mkdir -p /tmp/many; cd /tmp/many
for d in $(seq 1 20); do mkdir d$d; for f in $(seq 1 100); do echo $d.$f > d$d/f$f; touch -d @$((1600000000 + d * 1000 + f)).$f d$d/f$f; done; done`

// BenchmarkManyFiles checkpoints manyTimes and lays the same verified
// checkpoint into fresh sandboxes, both ways, interleaved in the same run:
// through agentd's exact tar routes (one download whose headers carry the
// nanoseconds; one upload that keeps everything, nothing run in the
// guest) and through the fallbacks an older agentd gets (the plain
// download plus a listing for the nanoseconds; the data filter's upload,
// then the script). It reports each median and fallback/exact (above 1:
// the exact path is that many times faster).
func BenchmarkManyFiles(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	src := e.launch(b)
	run(b, src, manyTimes)
	defer func(was func(*client.Session, context.Context, string) bool) { serves = was }(serves)
	var saved [2][]time.Duration // fallback, exact
	var m Manifest
	for round := 0; round < 6; round++ {
		exact := round%2 == 0
		serves = func(*client.Session, context.Context, string) bool { return exact }
		t0 := time.Now()
		got, err := Checkpoint(ctx, src, e.store, Options{Paths: []string{"/tmp/many"}})
		if err != nil {
			b.Fatal(err)
		}
		if exact {
			saved[1], m = append(saved[1], time.Since(t0)), got
		} else {
			saved[0] = append(saved[0], time.Since(t0))
		}
	}
	p, err := e.store.Prepare(ctx, m.Digest)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var took [2][]time.Duration // fallback, exact
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for round := 0; round < 3; round++ {
			for _, exact := range []bool{round%2 == 0, round%2 != 0} {
				sb := e.launch(b)
				serves = func(*client.Session, context.Context, string) bool { return exact }
				t0 := time.Now()
				if err := Lay(ctx, sb, p); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				if exact {
					took[1] = append(took[1], d)
				} else {
					took[0] = append(took[0], d)
				}
				sb.Terminate(ctx, teardown)
			}
		}
	}
	fallback, exact := median(took[0]), median(took[1])
	b.ReportMetric(float64(m.Files), "members")
	b.ReportMetric(float64(exact.Microseconds())/1000, "restore-exact-ms")
	b.ReportMetric(float64(fallback.Microseconds())/1000, "restore-fallback-ms")
	b.ReportMetric(fallback.Seconds()/exact.Seconds(), "restore-fallback/exact")
	sf, se := median(saved[0]), median(saved[1])
	b.ReportMetric(float64(se.Microseconds())/1000, "checkpoint-exact-ms")
	b.ReportMetric(float64(sf.Microseconds())/1000, "checkpoint-fallback-ms")
	b.ReportMetric(sf.Seconds()/se.Seconds(), "checkpoint-fallback/exact")
	b.ReportMetric(0, "ns/op")
}
