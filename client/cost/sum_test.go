package cost

import (
	"testing"
	"time"

	"github.com/microvms/microvms/client"
)

// Catches: a sum that re-prices (losing each report's own retention floor),
// drops a line one report lacks, keeps "measured" for a part that was
// projected, turns an unpriced line into $0, or sums different sizes.
func TestSumAddsLinesWithoutPricingAgain(t *testing.T) {
	rates := Pinned(client.USEast1)
	size := class(t, 2048)
	idle, err := RunReport("idle", size, Usage{Launched: true, Running: measured(t, time.Second), Suspended: measured(t, time.Minute), Unresumed: true}, rates, fresh)
	if err != nil {
		t.Fatal(err)
	}
	served, err := RunReport("served", size, Usage{Launched: true, Running: measured(t, 3*time.Second), Suspended: measured(t, time.Minute), Cycles: 1}, rates, fresh)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Estimate("plan", size, Plan{Running: 2 * time.Second}, rates, fresh)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Sum("pool", idle, served, plan)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "total", sum.Total().Floor(), idle.Total().Floor().Add(served.Total().Floor()).Add(plan.Total().Floor()))
	lines := map[Phase]map[Billing]Line{}
	for _, l := range sum.Lines {
		if lines[l.Phase] == nil {
			lines[l.Phase] = map[Billing]Line{}
		}
		lines[l.Phase][l.Billing] = l
	}
	// Two one-minute holds, each billed the one-week floor: 2 x 2 GB x 168 h.
	eq(t, "suspended GB-hours", lines[PhaseSuspended][BillSnapshotStorage].Quantity, d("672"))
	if got := lines[PhaseSuspended][BillSnapshotStorage].Duration; got.Time() != 2*time.Minute || got.Provenance() != Measured {
		t.Errorf("suspended duration %s", got)
	}
	eq(t, "snapshot writes", lines[PhaseSuspend][BillSnapshotWrite].Quantity, d("4"))
	eq(t, "snapshot reads on resume", lines[PhaseResume][BillSnapshotRead].Quantity, d("2"))
	if got := lines[PhaseRunning][BillVCPU].Duration; got.Time() != 6*time.Second || got.Provenance() != Projected {
		t.Errorf("running %s: one projected part makes the sum projected", got)
	}
	order := []Phase{}
	for _, l := range sum.Lines {
		if len(order) == 0 || order[len(order)-1] != l.Phase {
			order = append(order, l.Phase)
		}
	}
	want := []Phase{PhaseLaunch, PhaseRunning, PhaseSuspended, PhaseSuspend, PhaseResume}
	if len(order) != len(want) {
		t.Fatalf("phases %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("phases %v, want %v", order, want)
		}
	}

	unpriced, err := RunReport("eu", size, Usage{Launched: true}, Pinned(client.EUWest1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Sum("mixed", idle, unpriced); err == nil {
		t.Error("reports from two rate tables were summed")
	}
	if s, err := Sum("eu", unpriced, unpriced); err != nil || !s.Total().IsLowerBound() {
		t.Errorf("an unpriced line summed to a price: %v %v", s, err)
	}
	if _, err := Sum("big", idle, must(RunReport("big", class(t, 4096), Usage{Launched: true}, rates, fresh))); err == nil {
		t.Error("two sizes were summed")
	}
	if _, err := Sum("none"); err == nil {
		t.Error("an empty sum priced nothing as $0")
	}
}

func must(r Report, err error) Report {
	if err != nil {
		panic(err)
	}
	return r
}
