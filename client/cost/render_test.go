package cost

import (
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
)

// Catches: refusing a zero measured duration (`d <= 0` for `d < 0`): a phase
// timed at 0 happened, and must stay distinct from the zero Duration, which
// means it did not.
func TestZeroMeasuredDurationIsAccepted(t *testing.T) {
	z, err := MeasuredDuration(0)
	if err != nil {
		t.Fatalf("a zero measured duration was refused: %v", err)
	}
	if z.IsZero() || z.Provenance() != Measured || !z.Seconds().IsZero() {
		t.Fatalf("MeasuredDuration(0) = %v, want a set, measured 0s", z)
	}
}

// Catches: Amount.String taking the wrong branch (`a.unpriced == ""`), which
// prints an estimate as "unpriced ()" and an unknown as ~$0.000000 — the one
// thing this package must never print for an unknown.
func TestAmountRendersEstimateOrReason(t *testing.T) {
	if got := Estimated(d("0.0126100")).String(); got != "~$0.012610" {
		t.Errorf("estimate renders %q", got)
	}
	if got := Unpriced("no rate").String(); got != "unpriced (no rate)" {
		t.Errorf("unpriced renders %q", got)
	}
	if got := Unpriced("").UnpricedReason(); got == "" {
		t.Error("an unpriced amount without a reason must still say why")
	}
}

// Catches: a line that drops its note, or prints an empty "[]" (a negated
// `l.Note != ""`): the note is where the arithmetic's inputs are shown.
func TestLineRendersItsNoteOnlyWhenSet(t *testing.T) {
	l := Line{Phase: PhaseLaunch, Billing: BillSnapshotRead, Quantity: d("2"), Unit: "GB", Amount: Estimated(d("1"))}
	if s := l.String(); strings.Contains(s, "[") {
		t.Errorf("a line without a note renders brackets: %q", s)
	}
	l.Note = "1 x 2 GB"
	if s := l.String(); !strings.HasSuffix(s, "  [1 x 2 GB]") {
		t.Errorf("a line's note is missing: %q", s)
	}
}

// Catches: a zero RateTable (none chosen) that prices as unpriced with an
// empty reason (testing `t.unpriced != ""` in UnpricedReason).
func TestZeroRateTableSaysNoneWasChosen(t *testing.T) {
	var none RateTable
	if none.Priced() || none.UnpricedReason() != "no rate table was chosen" {
		t.Fatalf("zero table: priced %v, reason %q", none.Priced(), none.UnpricedReason())
	}
	r, err := RunReport("x", class(t, 2048), Usage{Running: measured(t, time.Second)}, none, fresh)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Lines {
		if l.Amount.UnpricedReason() != "no rate table was chosen" {
			t.Errorf("%s/%s: %s", l.Phase, l.Billing, l.Amount)
		}
	}
}

// Catches: the staleness warning counting its days wrong (multiplying by the
// day instead of dividing): 2027-08-07 is 365 days after the 2026-08-07 read.
func TestStalenessNamesItsAge(t *testing.T) {
	w := Pinned(client.USEast1).Staleness(time.Date(2027, 8, 7, 0, 0, 0, 0, time.UTC))
	if !strings.Contains(w, ", 365 days ago (stale after 90)") {
		t.Fatalf("staleness warning %q", w)
	}
}

// Catches: the comparison rendering "n/a" for a break-even it has, or a
// zero one for a break-even it has not (a negated `err == nil`). The us-east-1
// 2 GB break-even is 1370.98 s, rounded to 22m51s (TestResidency).
func TestResidencyRendersItsBreakEven(t *testing.T) {
	r, err := CompareResidency(class(t, 2048), 730*time.Hour, 1, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.String(); !strings.Contains(s, "break-even hold 22m51s,") {
		t.Fatalf("rendered comparison: %s", s)
	}
}
