package agentd

import (
	"math"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// Catches: the overflow clamp of a seconds setting compared the wrong way
// (`v / float64(time.Second)`, which clamps almost nothing) or one off at its
// edge (`>` for `>=`: a product of exactly 2^63 ns converts to a negative
// Duration). A limit set absurdly high must mean "as long as possible", never
// a negative duration that fires at once.
func TestSecondsSettingsClampInsteadOfOverflowing(t *testing.T) {
	for _, v := range []float64{1e10, math.MaxInt64 / float64(time.Second), 1e300} {
		if d := protocol.SecondsDuration(v); d != time.Duration(math.MaxInt64) {
			t.Errorf("protocol.SecondsDuration(%g) = %d, want the clamp %d", v, d, int64(math.MaxInt64))
		}
	}
	if d := protocol.SecondsDuration(1.5); d != 1500*time.Millisecond {
		t.Errorf("protocol.SecondsDuration(1.5) = %s", d)
	}
}

// Catches: a host-name character class one off at the edge of a range
// (`r > '0'`, `r < '9'`, `r > 'a'`, `r < 'Z'`, ...) or negated: 0, 9, a, z,
// A and Z are host-name characters.
func TestHostNamesTakeEveryDigitAndLetter(t *testing.T) {
	for _, h := range []string{"host0", "host9", "a-0.b-9.example", "az", "AZ", "zebra.Alpha"} {
		if err := checkHost(h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, h := range []string{"host_1", "host/9", "hóst"} {
		if err := checkHost(h); err == nil {
			t.Errorf("%s accepted", h)
		}
	}
}

// Catches: a zero keepalive, stall or open-body timeout kept by normalized
// (`<= 0` made `< 0`: the engine would spin on it), or a caller's positive
// value replaced by the default (the test negated).
func TestNormalizedReplacesOnlyZeroTimeouts(t *testing.T) {
	z := Config{}.normalized()
	if z.SSEKeepalive <= 0 || z.StreamStall <= 0 || z.OpenBodyTimeout <= 0 || z.StreamReplayBytes != 1 || z.MaxOpenBodies != 1 {
		t.Fatalf("zero config normalized to %+v", z)
	}
	set := Config{LimitSet: protocol.LimitSet{SSEKeepalive: 3 * time.Second, StreamStall: 4 * time.Second, OpenBodyTimeout: 5 * time.Second}}.normalized()
	if set.SSEKeepalive != 3*time.Second || set.StreamStall != 4*time.Second || set.OpenBodyTimeout != 5*time.Second {
		t.Fatalf("a caller's timeouts were replaced: %s %s %s", set.SSEKeepalive, set.StreamStall, set.OpenBodyTimeout)
	}
}
