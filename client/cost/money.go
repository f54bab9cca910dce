package cost

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// Provenance says whether a duration was timed or assumed.
type Provenance uint8

// The two provenances. There is no third, and the zero Duration has neither.
const (
	Measured Provenance = iota + 1
	Projected
)

func (p Provenance) String() string {
	switch p {
	case Measured:
		return "measured"
	case Projected:
		return "projected"
	}
	return "unset"
}

// Duration is a length of time that says where it came from. Only
// MeasuredDuration and ProjectedDuration make one; the zero Duration means
// "this phase did not happen" and contributes no line.
type Duration struct {
	d time.Duration
	p Provenance
}

// MeasuredDuration is a duration someone timed. A negative one (an inverted
// clock) is refused, since it would render as a credit.
func MeasuredDuration(d time.Duration) (Duration, error) { return newDuration(d, Measured) }

// ProjectedDuration is a duration assumed for a plan.
func ProjectedDuration(d time.Duration) (Duration, error) { return newDuration(d, Projected) }

func newDuration(d time.Duration, p Provenance) (Duration, error) {
	if d < 0 {
		return Duration{}, fmt.Errorf("cost: a %s duration of %s is negative", p, d)
	}
	return Duration{d: d, p: p}, nil
}

// Time is the length.
func (d Duration) Time() time.Duration { return d.d }

// Provenance is measured or projected (0 for the zero Duration).
func (d Duration) Provenance() Provenance { return d.p }

// IsZero reports whether d was never set.
func (d Duration) IsZero() bool { return d.p == 0 }

// Seconds is the length in seconds as an exact decimal (integer nanoseconds
// divided by a power of ten, so nothing is lost).
func (d Duration) Seconds() decimal.Decimal { return decimal.New(int64(d.d), -9) }

func (d Duration) String() string {
	return d.Seconds().String() + "s (" + d.p.String() + ")"
}

// Amount is a line's price: an estimate in USD, or Unpriced with the reason
// no rate applies. Unknown is a value here, never $0.
type Amount struct {
	usd      decimal.Decimal
	unpriced string
}

// Estimated is a priced amount.
func Estimated(usd decimal.Decimal) Amount { return Amount{usd: usd} }

// Unpriced is an amount with no published rate; reason must say why.
func Unpriced(reason string) Amount {
	if reason == "" {
		reason = "no published rate"
	}
	return Amount{unpriced: reason}
}

// Estimate is the USD estimate and true, or zero and false when unpriced.
func (a Amount) Estimate() (decimal.Decimal, bool) { return a.usd, a.unpriced == "" }

// UnpricedReason is why there is no price, or "".
func (a Amount) UnpricedReason() string { return a.unpriced }

// String is "~$0.012610" for an estimate and "unpriced (reason)" otherwise.
func (a Amount) String() string {
	if a.unpriced != "" {
		return "unpriced (" + a.unpriced + ")"
	}
	return FormatUSD(a.usd)
}

// FormatUSD renders an estimate at six decimal places with a leading "~$",
// because every figure here is an estimate, never a bill.
func FormatUSD(d decimal.Decimal) string { return "~$" + d.StringFixed(6) }
