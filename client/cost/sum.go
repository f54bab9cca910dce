package cost

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// phaseOrder is the lifecycle order a summed report lists its lines in.
var phaseOrder = []Phase{PhaseImageBuild, PhaseImageStorage, PhaseLaunch, PhaseRunning, PhaseSuspended, PhaseSuspend, PhaseResume}

// Sum is one report for many sandboxes of one size priced from one rate
// table (a fleet, a pool): each billed line of the same phase, billing and
// unit is added up, quantity and amount alike, so nothing is priced again
// and every per-sandbox rule (the retention floor of each snapshot, say)
// stays as each report applied it. A line unpriced in any report is
// unpriced in the sum, with that reason; a duration is measured only when
// every part was. Reports of different sizes or rate tables are refused,
// as is an empty list: nothing launched is nothing to price, not $0.
func Sum(label string, reports ...Report) (Report, error) {
	if len(reports) == 0 {
		return Report{}, errors.New("cost: no reports to sum")
	}
	first := reports[0]
	type key struct {
		phase   Phase
		billing Billing
		unit    string
	}
	type acc struct {
		line  Line
		notes map[string]bool
		parts int
		usd   decimal.Decimal
		priced,
		measured bool
		dur time.Duration
	}
	var order []key
	sums := map[key]*acc{}
	for _, r := range reports {
		if r.Size != first.Size || r.Rates.Region() != first.Rates.Region() || !r.Rates.Retrieved().Equal(first.Rates.Retrieved()) || r.Rates.Source() != first.Rates.Source() {
			return Report{}, fmt.Errorf("cost: cannot sum %q (%s, %s) with %q (%s, %s): one size and one rate table only", r.Label, r.Size, r.Rates, first.Label, first.Size, first.Rates)
		}
		for _, l := range r.Lines {
			k := key{l.Phase, l.Billing, l.Unit}
			a := sums[k]
			if a == nil {
				a = &acc{line: Line{Phase: l.Phase, Billing: l.Billing, Unit: l.Unit}, notes: map[string]bool{}, priced: true, measured: true}
				sums[k] = a
				order = append(order, k)
			}
			a.parts++
			a.notes[l.Note] = true
			a.line.Quantity = a.line.Quantity.Add(l.Quantity)
			if usd, ok := l.Amount.Estimate(); ok {
				a.usd = a.usd.Add(usd)
			} else if a.priced {
				a.priced = false
				a.line.Amount = l.Amount
			}
			if !l.Duration.IsZero() {
				a.dur += l.Duration.Time()
				if l.Duration.Provenance() != Measured {
					a.measured = false
				}
			}
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		return slices.Index(phaseOrder, a.phase) - slices.Index(phaseOrder, b.phase)
	})
	lines := make([]Line, 0, len(order))
	for _, k := range order {
		a := sums[k]
		l := a.line
		if a.priced {
			l.Amount = Estimated(a.usd)
		}
		if a.dur > 0 {
			var err error
			if a.measured {
				l.Duration, err = MeasuredDuration(a.dur)
			} else {
				l.Duration, err = ProjectedDuration(a.dur)
			}
			if err != nil {
				return Report{}, err
			}
		}
		l.Note = fmt.Sprintf("%d sandboxes", a.parts)
		if a.parts == 1 {
			// One report's line (a shared image's, say) is that line.
			for n := range a.notes {
				l.Note = n
			}
		} else if len(a.notes) == 1 {
			for n := range a.notes {
				if n != "" {
					l.Note += "; each " + n
				}
			}
		}
		lines = append(lines, l)
	}
	return Report{Label: label, Size: first.Size, Rates: first.Rates, Lines: lines, Staleness: first.Staleness}, nil
}
