package agentd

import (
	"io"
	"slices"
	"testing"
	"time"
)

// Catches: writeBehind's threshold made strict (`>`) or negated, its
// distance computed as off+kicked, or the kicked range's length as
// off+kicked. None changes the file's bytes (the fsync before the commit
// writes everything either way), only when the kernel is asked to start
// writeback and over which bytes, so the kicks themselves are checked.
func TestWriteBehindKicksEachStretchOnce(t *testing.T) {
	type kick struct{ off, n int64 }
	var kicks []kick
	w := &writeBehind{w: io.Discard, fd: -1, kick: func(fd int, off, n int64) {
		if fd != -1 {
			t.Errorf("kick on fd %d, want the writer's -1", fd)
		}
		kicks = append(kicks, kick{off, n})
	}}
	const mib = 1 << 20
	write := func(n int) {
		if got, err := w.Write(make([]byte, n)); got != n || err != nil {
			t.Fatalf("write of %d: %d, %v", n, got, err)
		}
	}
	for range 20 {
		write(mib)
	}
	// Exactly 8 MiB landed kicks at once; 20 MiB kicks twice.
	want := []kick{{0, 8 * mib}, {8 * mib, 8 * mib}}
	if !slices.Equal(kicks, want) {
		t.Fatalf("after 20 x 1 MiB: kicks %v, want %v", kicks, want)
	}
	// A stretch that ends off a MiB boundary is kicked whole, from where the
	// last kick ended.
	write(3*mib + 5) // 23 MiB + 5 landed, 7 MiB + 5 unkicked: no kick
	if len(kicks) != 2 {
		t.Fatalf("kicked %v at 7 MiB + 5 unkicked", kicks)
	}
	write(mib) // 8 MiB + 5 unkicked
	want = append(want, kick{16 * mib, 8*mib + 5})
	if !slices.Equal(kicks, want) {
		t.Fatalf("kicks %v, want %v", kicks, want)
	}
}

// Catches: the collector's period made TTL*4 or TTL (an acked record kept
// for up to five times its TTL), or its floor or ceiling lost or swapped.
func TestCollectorRunsFourTimesPerTTL(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{100 * time.Millisecond, 25 * time.Millisecond},
		{60 * time.Second, 15 * time.Second},
		{15 * time.Minute, 30 * time.Second}, // the default TTL: the ceiling
		{20 * time.Millisecond, 10 * time.Millisecond},
		{0, 10 * time.Millisecond}, // the floor: time.NewTicker panics on 0
	} {
		if got := collectEvery(c.ttl); got != c.want {
			t.Errorf("collectEvery(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}
