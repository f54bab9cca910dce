package cost

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// AttributionRule is how ByCommand splits a sandbox's running cost, stated
// once so every surface that shows the split can quote it.
const AttributionRule = "The running cost (the vCPU and memory lines, billed at baseline whether busy or idle) is spread evenly over the billed running time. " +
	"At each instant the commands running share it equally: k overlapping commands get 1/k each. " +
	"Running time with no command running is idle. Suspended time is not running time: it carries no running cost, and a command's time while the sandbox was suspended is not counted. " +
	"Each share is rounded down to 1e-9 USD; the idle remainder is the total minus the shares, so it absorbs the rounding and the shares plus the idle remainder equal the total exactly."

// SharePlaces is the decimal places a command's share is rounded down to.
const SharePlaces = 9

// Interval is a stretch of wall-clock time, [Start, End).
type Interval struct {
	Start, End time.Time
}

// CommandSpan is one command's life in the sandbox: from its start to its
// exit, as the caller timed them.
type CommandSpan struct {
	ID string
	Interval
}

// Share is one command's part of the running cost.
type Share struct {
	ID string
	// Seconds is the running time attributed to it: overlapped time counts
	// 1/k, time while suspended not at all. Exact.
	Seconds decimal.Decimal
	USD     decimal.Decimal // rounded down to SharePlaces
}

// ByCommand is a sandbox's running cost split over its commands.
type ByCommand struct {
	Rule        string
	Total       decimal.Decimal // the running lines of the report, summed
	Shares      []Share         // in the order the commands were given
	Idle        decimal.Decimal // Total minus the shares: idle time's cost plus rounding
	IdleSeconds decimal.Decimal // running time with no command running
}

// Check is the invariant every ByCommand keeps; a test and a renderer may
// both call it.
func (b ByCommand) Check() error {
	sum := b.Idle
	for _, s := range b.Shares {
		sum = sum.Add(s.USD)
	}
	if !sum.Equal(b.Total) {
		return fmt.Errorf("cost: shares plus idle are %s, the total %s", sum, b.Total)
	}
	return nil
}

// AttributeCommands splits rep's running cost over cmds. running is when the
// sandbox was RUNNING (each launch or resume to the next suspend or
// terminate); it must add up to the report's running duration, so the cost
// split is the cost billed. A report whose running lines are unpriced has no
// cost to split, and is refused.
func AttributeCommands(rep Report, running []Interval, cmds []CommandSpan) (ByCommand, error) {
	total := decimal.Zero
	var billed time.Duration
	found := false
	for _, l := range rep.Lines {
		if l.Phase != PhaseRunning {
			continue
		}
		usd, ok := l.Amount.Estimate()
		if !ok {
			return ByCommand{}, fmt.Errorf("cost: the running line %s is unpriced (%s), so there is no cost to attribute", l.Billing, l.Amount.UnpricedReason())
		}
		total = total.Add(usd)
		billed = l.Duration.Time() // both running lines carry the same duration
		found = true
	}
	var spans time.Duration
	for i, iv := range running {
		if iv.End.Before(iv.Start) {
			return ByCommand{}, fmt.Errorf("cost: running interval %d ends before it starts", i)
		}
		if i > 0 && iv.Start.Before(running[i-1].End) {
			return ByCommand{}, errors.New("cost: running intervals must be in order and not overlap")
		}
		spans += iv.End.Sub(iv.Start)
	}
	if !found && spans > 0 {
		return ByCommand{}, errors.New("cost: the report has no running lines, but running intervals were given")
	}
	if spans != billed {
		return ByCommand{}, fmt.Errorf("cost: the running intervals add up to %s, but the report billed %s running", spans, billed)
	}
	for _, c := range cmds {
		if c.End.Before(c.Start) {
			return ByCommand{}, fmt.Errorf("cost: command %q ends before it starts", c.ID)
		}
	}

	// Sweep the elementary pieces between every boundary, inside the
	// running intervals. Weights are exact rationals (nanoseconds / k).
	weights := make([]*big.Rat, len(cmds))
	for i := range weights {
		weights[i] = new(big.Rat)
	}
	idleNS := new(big.Int)
	for _, iv := range running {
		cuts := []time.Time{iv.Start, iv.End}
		for _, c := range cmds {
			for _, t := range []time.Time{c.Start, c.End} {
				if t.After(iv.Start) && t.Before(iv.End) {
					cuts = append(cuts, t)
				}
			}
		}
		slices.SortFunc(cuts, func(a, b time.Time) int { return a.Compare(b) })
		cuts = slices.CompactFunc(cuts, func(a, b time.Time) bool { return a.Equal(b) })
		for j := 0; j+1 < len(cuts); j++ {
			a, b := cuts[j], cuts[j+1]
			d := b.Sub(a).Nanoseconds()
			var active []int
			for i, c := range cmds {
				if !c.Start.After(a) && !c.End.Before(b) {
					active = append(active, i)
				}
			}
			if len(active) == 0 {
				idleNS.Add(idleNS, big.NewInt(d))
				continue
			}
			part := big.NewRat(d, int64(len(active)))
			for _, i := range active {
				weights[i].Add(weights[i], part)
			}
		}
	}

	out := ByCommand{Rule: AttributionRule, Total: total, Shares: make([]Share, len(cmds)),
		IdleSeconds: decimal.NewFromBigInt(idleNS, -9)}
	idle := total
	runNS := big.NewInt(spans.Nanoseconds())
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(SharePlaces), nil)
	for i, c := range cmds {
		usd := decimal.Zero
		if runNS.Sign() > 0 {
			// floor(total * w / running * 10^places) / 10^places, exactly.
			q := new(big.Rat).Mul(total.Rat(), weights[i])
			q.Quo(q, new(big.Rat).SetInt(runNS))
			q.Mul(q, new(big.Rat).SetInt(scale))
			n := new(big.Int).Quo(q.Num(), q.Denom()) // non-negative: truncation is the floor
			usd = decimal.NewFromBigInt(n, -SharePlaces)
		}
		out.Shares[i] = Share{ID: c.ID, Seconds: ratSeconds(weights[i]), USD: usd}
		idle = idle.Sub(usd)
	}
	out.Idle = idle
	return out, out.Check()
}

// ratSeconds is nanoseconds as seconds, rounded to the nanosecond (a 1/k
// share of a nanosecond is below anything billed; USD is computed from the
// exact weight, never from this).
func ratSeconds(ns *big.Rat) decimal.Decimal {
	s := new(big.Rat).Quo(ns, big.NewRat(1e9, 1))
	d, _ := decimal.NewFromString(s.FloatString(9))
	return d
}
