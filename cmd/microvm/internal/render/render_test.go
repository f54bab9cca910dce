package render

import (
	"testing"
	"time"
)

// Byte counts in progress lines and summaries: exact below 1 KiB, one
// decimal in the largest binary unit the count reaches. Catches, in
// humanBytes, `n < unit` made `<=` (1024 shown as "1024 B"), the loop's
// `n / unit` made `*` or its `m >= unit` made `>` or negated (the wrong
// unit at a power of 1024), and `float64(n)/float64(div)` made `*`.
func TestHumanBytesPicksTheUnitAtEachPowerOf1024(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{1 << 20, "1.0 MiB"},
		{3 << 29, "1.5 GiB"},
		{1 << 30, "1.0 GiB"},
		{1 << 40, "1.0 TiB"},
	} {
		if got := HumanBytes(c.n); got != c.want {
			t.Errorf("humanBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// Durations to a reader's precision: whole seconds from a minute up,
// hundredths of a second from a second up, milliseconds below. Catches the
// rounding steps changed (`10 * time.Millisecond` made `/`, which rounds
// to the nanosecond) and each threshold made non-strict.
func TestHumanDurationRoundsToTheReadersPrecision(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{1234567 * time.Microsecond, "1.23s"},
		{time.Second, "1s"},
		{999499 * time.Microsecond, "999ms"},
		{time.Minute + 1400*time.Millisecond, "1m1s"},
		{time.Minute, "1m0s"},
		{59*time.Second + 994*time.Millisecond, "59.99s"},
	} {
		if got := HumanDuration(c.d); got != c.want {
			t.Errorf("humanDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
