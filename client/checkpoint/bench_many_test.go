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

// BenchmarkRestoreManyFiles lays the same verified checkpoint of manyTimes
// into fresh sandboxes both ways, interleaved in the same run: through
// agentd's exact extraction (one upload, nothing run in the guest) and
// through the fallback an older agentd gets (the data filter's upload,
// then the script). It reports each median and fallback/exact (above 1:
// the exact path is that many times faster).
func BenchmarkRestoreManyFiles(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	src := e.launch(b)
	run(b, src, manyTimes)
	m, err := Checkpoint(ctx, src, e.store, Options{Paths: []string{"/tmp/many"}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := e.store.Prepare(ctx, m.Digest)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	defer func() { exactServed = servesExact }()
	var took [2][]time.Duration // fallback, exact
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for round := 0; round < 3; round++ {
			for _, exact := range []bool{round%2 == 0, round%2 != 0} {
				sb := e.launch(b)
				exactServed = func(context.Context, *client.Session) bool { return exact }
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
	b.ReportMetric(float64(exact.Microseconds())/1000, "exact-ms")
	b.ReportMetric(float64(fallback.Microseconds())/1000, "fallback-ms")
	b.ReportMetric(fallback.Seconds()/exact.Seconds(), "fallback/exact")
	b.ReportMetric(0, "ns/op")
}
