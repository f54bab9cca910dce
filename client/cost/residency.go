package cost

import (
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
)

// Residency compares leaving a VM running with suspending it over the same
// hold. Both sides leave out the image (the same either way, and unpriced).
type Residency struct {
	Size      client.SizeClass
	Hold      Duration // always projected: a hold nobody has taken yet
	Cycles    int
	Running   Report
	Suspended Report // transitions included
	rates     RateTable
}

// CompareResidency builds both reports for a hold of d with cycles
// suspend/resume transitions.
func CompareResidency(size client.SizeClass, d time.Duration, cycles int, rates RateTable, now time.Time) (Residency, error) {
	if !rates.Priced() {
		return Residency{}, fmt.Errorf("cost: cannot compare residency: %s", rates.UnpricedReason())
	}
	hold, err := ProjectedDuration(d)
	if err != nil {
		return Residency{}, err
	}
	run, err := RunReport("left running", size, Usage{Running: hold}, rates, now)
	if err != nil {
		return Residency{}, err
	}
	sus, err := RunReport("suspended", size, Usage{Suspended: hold, Cycles: cycles}, rates, now)
	if err != nil {
		return Residency{}, err
	}
	return Residency{Size: size, Hold: hold, Cycles: cycles, Running: run, Suspended: sus, rates: rates}, nil
}

// PerCycle is one suspend/resume: a snapshot write plus a read of the
// baseline memory.
func (r Residency) PerCycle() decimal.Decimal {
	_, gb := baselineOf(r.Size)
	return gb.Mul(r.rates.SnapshotWriteGB().Add(r.rates.SnapshotReadGB()))
}

// BreakEven is the shortest suspended hold for which one suspend/resume
// cycle costs less than having left the VM running. Below it, churn costs
// more than residency saves.
//
// Within the one-week retention floor the suspended side is a constant
// (floor storage plus one cycle), so the hold solves running×t = constant;
// past the floor storage grows with the hold and the slope changes.
func (r Residency) BreakEven() (time.Duration, error) {
	vcpu, gb := baselineOf(r.Size)
	running := vcpu.Mul(r.rates.VCPUSecond()).Add(gb.Mul(r.rates.GBSecond()))
	storage := gb.Mul(r.rates.StorageGBHour()).Div(secondsPerHour)
	floor := decimal.NewFromInt(int64(MinimumRetention / time.Second))
	churn := r.PerCycle()
	if !running.IsPositive() {
		return 0, errors.New("cost: running rate is zero")
	}
	t := churn.Add(floor.Mul(storage)).Div(running)
	if t.GreaterThan(floor) {
		if !running.GreaterThan(storage) {
			return 0, errors.New("cost: storage costs at least as much as running; suspending never pays")
		}
		t = churn.Div(running.Sub(storage))
	}
	return time.Duration(t.Mul(decimal.NewFromInt(int64(time.Second))).Ceil().IntPart()), nil
}

// Ratio is how many times more the running side costs than the suspended one.
func (r Residency) Ratio() decimal.Decimal {
	s := r.Suspended.Total().Floor()
	if s.IsZero() {
		return decimal.Zero
	}
	return r.Running.Total().Floor().DivRound(s, 4)
}

func (r Residency) String() string {
	be, err := r.BreakEven()
	beText := "n/a"
	if err == nil {
		beText = be.Round(time.Second).String()
	}
	return fmt.Sprintf("%s held %s\n  running:   %s\n  suspended: %s (%d cycle(s))\n  ratio:     %sx\n  per cycle: %s; break-even hold %s, so avoid churn rather than residency",
		r.Size, r.Hold, r.Running.Total(), r.Suspended.Total(), r.Cycles, r.Ratio().StringFixed(1), FormatUSD(r.PerCycle()), beText)
}
