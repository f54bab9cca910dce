package cost

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
)

// fresh is a day on which the pinned table is not stale.
var fresh = time.Date(2026, 8, 8, 0, 0, 0, 0, time.UTC)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func class(t *testing.T, mib int) client.SizeClass {
	t.Helper()
	c, err := client.SizeClassFromBaseline(mib)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func measured(t *testing.T, dur time.Duration) Duration {
	t.Helper()
	m, err := MeasuredDuration(dur)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func eq(t *testing.T, what string, got, want decimal.Decimal) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func line(t *testing.T, r Report, p Phase, b Billing) Line {
	t.Helper()
	for _, l := range r.Lines {
		if l.Phase == p && l.Billing == b {
			return l
		}
	}
	t.Fatalf("no %s/%s line in %s", p, b, r)
	return Line{}
}

func usd(t *testing.T, l Line) decimal.Decimal {
	t.Helper()
	v, ok := l.Amount.Estimate()
	if !ok {
		t.Fatalf("%s is unpriced: %s", l.Phase, l.Amount)
	}
	return v
}

// The pinned figures, written out a second time on purpose: a hand edit of the
// table (or a reformat that changes a digit) has to change this test too.
func TestPinnedFigures(t *testing.T) {
	rows := []struct {
		region                      client.Region
		vcpu, gb, hour, read, write string
		catches                     string
	}{
		{client.USEast1, "0.0000276944", "0.0000036667", "0.0001111111", "0.0015467699", "0.0037977138", "pinning the rounded 0.00155/0.0038 page figures instead of the API's"},
		{client.USEast2, "0.0000276944", "0.0000036667", "0.0001111111", "0.0015467699", "0.0037977138", "giving us-east-2 its own invented figures"},
		{client.USWest2, "0.0000276944", "0.0000036667", "0.0001111111", "0.0015467699", "0.0037977138", "giving us-west-2 its own invented figures"},
		{client.APNortheast1, "0.0000322421", "0.0000042688", "0.0001333333", "0.0018548941", "0.0046556039", "pricing Tokyo from us-east-1 (up to 22.6% low)"},
	}
	for _, r := range rows {
		tb := Pinned(r.region)
		if !tb.Priced() {
			t.Fatalf("%s unpriced (catches: %s)", r.region, r.catches)
		}
		eq(t, r.region.String()+" vcpu", tb.VCPUSecond(), d(r.vcpu))
		eq(t, r.region.String()+" gb", tb.GBSecond(), d(r.gb))
		eq(t, r.region.String()+" storage/h", tb.StorageGBHour(), d(r.hour))
		eq(t, r.region.String()+" read", tb.SnapshotReadGB(), d(r.read))
		eq(t, r.region.String()+" write", tb.SnapshotWriteGB(), d(r.write))
		if !tb.Retrieved().Equal(time.Date(2026, 8, 7, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("%s retrieved %s", r.region, tb.Retrieved())
		}
	}
	// GB-month is derived at AWS's 730-hour month: 0.0001111111 × 730 =
	// 0.0811111030. Catches: pinning the old round 0.08, or a 720-hour month
	// (0.0799999920).
	eq(t, "GB-month", Pinned(client.USEast1).StorageGBMonth(), d("0.0811111030"))
	// Tokyo: 0.0001333333 × 730 = 0.0973333090.
	eq(t, "Tokyo GB-month", Pinned(client.APNortheast1).StorageGBMonth(), d("0.0973333090"))

	// Catches: inventing eu-west-1 figures from the rounded percentages, or
	// silently using us-east-1's for it.
	eu := Pinned(client.EUWest1)
	if eu.Priced() || !strings.Contains(eu.UnpricedReason(), "eu-west-1") {
		t.Errorf("eu-west-1 must be unpriced with a reason, got %v", eu)
	}
	if Pinned(client.UnlistedRegion("eu-central-1")).Priced() {
		t.Error("an unlisted region has no rates")
	}
}

// Worked example, 2048 MiB class (1 vCPU / 2 GB baseline), one measured hour
// in us-east-1:
//
//	vCPU:   1 vCPU × 3600 s = 3600 vCPU-s × 0.0000276944 = 0.09969984
//	memory: 2 GB × 3600 s  = 7200 GB-s  × 0.0000036667 = 0.02640024
//	total                                               = 0.12610008
//
// Peak (4 vCPU, 8 GB) would give 0.39879936 + 0.10560096; x86 vCPU would give
// 3600 × 0.0000326557 = 0.11756052.
func TestComputeFromBaselineARM(t *testing.T) {
	r, err := RunReport("hour", class(t, 2048), Usage{Running: measured(t, time.Hour)}, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	v, m := line(t, r, PhaseRunning, BillVCPU), line(t, r, PhaseRunning, BillMemory)
	// Catches: reading PeakVCPU/PeakMiB (14400 vCPU-s, 28800 GB-s).
	eq(t, "vCPU-seconds", v.Quantity, d("3600"))
	eq(t, "GB-seconds", m.Quantity, d("7200"))
	// Catches: the x86 rate (0.11756052) or a blended single line.
	eq(t, "vCPU $", usd(t, v), d("0.09969984"))
	eq(t, "memory $", usd(t, m), d("0.02640024"))
	tot := r.Total()
	eq(t, "total", tot.Floor(), d("0.12610008"))
	if tot.IsLowerBound() || r.Staleness != "" {
		t.Errorf("a measured compute-only report is exact and fresh: %s", r)
	}
	if len(r.Lines) != 2 {
		t.Errorf("two compute lines, got %d", len(r.Lines))
	}
	if !r.FullyMeasured() {
		t.Error("measured durations")
	}
}

// 512 MiB class (0.25 vCPU / 0.5 GB), one hour:
//
//	vCPU:   0.25 × 3600 = 900 vCPU-s  × 0.0000276944 = 0.024924960
//	memory: 0.5  × 3600 = 1800 GB-s   × 0.0000036667 = 0.006600060
//
// Catches: deriving vCPU from MiB/1024 (0.5, doubling the vCPU line) or a
// float conversion that is not exact (0.25 must stay 0.25).
func TestSmallestClass(t *testing.T) {
	r, err := RunReport("small", class(t, 512), Usage{Running: measured(t, time.Hour)}, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "vCPU-seconds", line(t, r, PhaseRunning, BillVCPU).Quantity, d("900"))
	eq(t, "vCPU $", usd(t, line(t, r, PhaseRunning, BillVCPU)), d("0.02492496"))
	eq(t, "memory $", usd(t, line(t, r, PhaseRunning, BillMemory)), d("0.00660006"))
}

// Tokyo, 2048 class, one hour: 3600 × 0.0000322421 + 7200 × 0.0000042688
// = 0.11607156 + 0.03073536 = 0.14680692.
// Catches: a report ignoring the table it was handed (us-east-1 gives 0.12610008).
func TestRegionalTable(t *testing.T) {
	r, err := RunReport("tokyo", class(t, 2048), Usage{Running: measured(t, time.Hour)}, Pinned(client.APNortheast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "Tokyo total", r.Total().Floor(), d("0.14680692"))
}

// Image: 2 GB stored, deleted after 60 s (measured), us-east-1. The one-week
// floor bills 168 hours: 2 GB × 168 h = 336 GB-h × 0.0001111111 = 0.0373333296
// ("about four cents"). The build line is unpriced, so the total is a lower bound.
func TestImageStorageFloorAndUnpricedBuild(t *testing.T) {
	r, err := RunReport("create-destroy", class(t, 2048), Usage{
		ImageGB: d("2"), ImageRetained: measured(t, time.Minute), ImageBuild: measured(t, 90*time.Second),
	}, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	st := line(t, r, PhaseImageStorage, BillSnapshotStorage)
	// Catches: dropping the retention floor (60 s would be 0.0000037037).
	eq(t, "GB-hours", st.Quantity, d("336"))
	eq(t, "image storage $", usd(t, st), d("0.0373333296"))
	if !strings.Contains(st.Note, "7-day minimum") {
		t.Errorf("note must say the floor applied: %q", st.Note)
	}
	b := line(t, r, PhaseImageBuild, "")
	// Catches: pricing the build as $0 instead of Unpriced.
	if _, ok := b.Amount.Estimate(); ok || b.Amount.UnpricedReason() != BuildUnpricedReason {
		t.Errorf("build must be unpriced: %s", b.Amount)
	}
	eq(t, "build seconds", b.Quantity, d("90"))
	tot := r.Total()
	// Catches: a total that silently sums unpriced lines as zero and reads exact.
	if !tot.IsLowerBound() || len(tot.UnpricedLines()) != 1 || tot.UnpricedLines()[0].Phase != PhaseImageBuild {
		t.Fatalf("total must be a lower bound naming the build: %s", tot)
	}
	eq(t, "floor", tot.Floor(), d("0.0373333296"))
	if s := tot.String(); !strings.HasPrefix(s, "at least ~$0.037333") || !strings.Contains(s, "image-build") {
		t.Errorf("total renders %q", s)
	}
	// An image held longer than the floor is billed as held: 2 GB × 200 h =
	// 400 GB-h × 0.0001111111 = 0.04444444.
	r2, _ := RunReport("long", class(t, 2048), Usage{ImageGB: d("2"), ImageRetained: measured(t, 200*time.Hour)}, Pinned(client.USEast1), fresh)
	eq(t, "long-held image $", usd(t, line(t, r2, PhaseImageStorage, BillSnapshotStorage)), d("0.04444444"))
}

// One suspend/resume cycle of a 2048 class VM: a write plus a read of 2 GB,
// 2 × 0.0037977138 + 2 × 0.0015467699 = 0.0075954276 + 0.0030935398 = 0.0106889674
// ("about $0.011"). A 730-hour suspended month: 2 GB × 730 h × 0.0001111111
// = 0.162222206 ("about $0.16").
func TestSuspendCycleAndHold(t *testing.T) {
	month := 730 * time.Hour
	r, err := RunReport("pool", class(t, 2048), Usage{Suspended: measured(t, month), Cycles: 1}, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	// Catches: one rate used for both directions.
	eq(t, "write", usd(t, line(t, r, PhaseSuspend, BillSnapshotWrite)), d("0.0075954276"))
	eq(t, "read", usd(t, line(t, r, PhaseResume, BillSnapshotRead)), d("0.0030935398"))
	// Catches: sizing the snapshot at the peak (8 GB, 4× the storage).
	eq(t, "suspended month", usd(t, line(t, r, PhaseSuspended, BillSnapshotStorage)), d("0.162222206"))
	// Catches: a compute line (even at zero) on a suspended VM.
	for _, l := range r.Lines {
		if l.Billing == BillVCPU || l.Billing == BillMemory {
			t.Errorf("suspended VM billed compute: %s", l)
		}
	}
}

// A plan marks every duration projected. Catches: Estimate passing a
// duration through as measured.
func TestEstimateIsProjected(t *testing.T) {
	r, err := Estimate("plan", class(t, 2048), Plan{Running: time.Hour, Suspended: time.Hour, Cycles: 2, ImageGB: d("1"), Launched: true}, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Lines {
		if !l.Duration.IsZero() && l.Duration.Provenance() != Projected {
			t.Errorf("%s: %s", l.Phase, l.Duration)
		}
	}
	if r.FullyMeasured() {
		t.Error("a plan is not measured")
	}
	// The plan built an image, so the unpriced build line is there.
	if !r.Total().IsLowerBound() {
		t.Error("a plan with an image has an unpriced build")
	}
	// Launch reads the image's 1 GB: 1 × 0.0015467699.
	eq(t, "launch read", usd(t, line(t, r, PhaseLaunch, BillSnapshotRead)), d("0.0015467699"))
}

// Catches: a negative (inverted-clock) duration rendering as a credit.
func TestNegativeDurationRefused(t *testing.T) {
	if _, err := MeasuredDuration(-time.Second); err == nil {
		t.Error("negative measured duration accepted")
	}
	if _, err := Estimate("x", class(t, 2048), Plan{Running: -time.Second}, Pinned(client.USEast1), fresh); err == nil {
		t.Error("negative plan accepted")
	}
}

// Retrieved 2026-08-07; 90 days later is 2026-11-05 (24 + 30 + 31 + 5).
// Catches: an off-by-one window, a staleness check that never fires, or one
// that warns on a fresh table.
func TestStaleness(t *testing.T) {
	tb := Pinned(client.USEast1)
	cases := []struct {
		now   time.Time
		stale bool
	}{
		{time.Date(2026, 8, 7, 0, 0, 0, 0, time.UTC), false},
		{time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), false},
		{time.Date(2026, 11, 6, 0, 0, 0, 0, time.UTC), true},
		{time.Date(2027, 8, 7, 0, 0, 0, 0, time.UTC), true},
	}
	for _, c := range cases {
		r, err := RunReport("x", class(t, 2048), Usage{Running: measured(t, time.Second)}, tb, c.now)
		if err != nil {
			t.Fatal(err)
		}
		if (r.Staleness != "") != c.stale {
			t.Errorf("%s: staleness %q, want stale=%v", c.now.Format(time.DateOnly), r.Staleness, c.stale)
		}
		if c.stale && (!strings.Contains(r.Staleness, "2026-08-07") || !strings.Contains(r.String(), "warning:")) {
			t.Errorf("warning must carry the date and be rendered: %q", r.Staleness)
		}
	}
}

// eu-west-1 has no pinned figures: every line is Unpriced with the reason,
// and the total is a lower bound of $0, never an exact $0.
// Catches: a missing table priced as zero.
func TestUnpricedRegion(t *testing.T) {
	r, err := RunReport("eu", class(t, 2048), Usage{Running: measured(t, time.Hour)}, Pinned(client.EUWest1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	tot := r.Total()
	if !tot.IsLowerBound() || len(tot.UnpricedLines()) != 2 || !tot.Floor().IsZero() {
		t.Fatalf("eu-west-1: %s", tot)
	}
}

func recorded() []CatalogEntry {
	return []CatalogEntry{
		{"AWS-Lambda-MicroVM-vCPU-Second-ARM", "vCPU-Seconds", d("0.0000276944")},
		{"AWS-Lambda-MicroVM-vCPU-Second", "vCPU-Seconds", d("0.0000326557")},
		{"AWS-Lambda-MicroVM-Memory-GB-Second-ARM", "GB-Seconds", d("0.0000036667")},
		{"AWS-Lambda-MicroVM-Memory-GB-Second", "GB-Seconds", d("0.0000043235")},
		{"AWS-Lambda-MicroVM-Snapshot-Storage-GB-Hour", "GB-Hours", d("0.0001111111")},
		{"AWS-Lambda-MicroVM-Snapshot-Read-GB", "GB", d("0.0015467699")},
		{"AWS-Lambda-MicroVM-Snapshot-Write-GB", "GB", d("0.0037977138")},
	}
}

func without(group CatalogLine) []CatalogEntry {
	var out []CatalogEntry
	for _, e := range recorded() {
		if e.Group != group {
			out = append(out, e)
		}
	}
	return out
}

func TestFromCatalog(t *testing.T) {
	// The recorded us-east-1 catalog reproduces the pinned table exactly.
	// Catches: FromCatalog choosing the x86 line when both are present.
	tb, err := FromCatalog(client.USEast1, "test", fresh, recorded())
	if err != nil {
		t.Fatal(err)
	}
	p := Pinned(client.USEast1)
	for _, pair := range [][2]decimal.Decimal{{tb.VCPUSecond(), p.VCPUSecond()}, {tb.GBSecond(), p.GBSecond()}, {tb.StorageGBHour(), p.StorageGBHour()}, {tb.SnapshotReadGB(), p.SnapshotReadGB()}, {tb.SnapshotWriteGB(), p.SnapshotWriteGB()}} {
		eq(t, "catalog vs pinned", pair[0], pair[1])
	}
	refusals := []struct {
		entries []CatalogEntry
		must    string
		catches string
	}{
		{without(LineVCPUSecond), "0.0000326557", "falling back to the x86 vCPU rate when the ARM line is missing"},
		{without(LineMemoryGBSecond), "0.0000043235", "falling back to the x86 memory rate"},
		{without(LineSnapshotWriteGB), "Snapshot-Write-GB", "a partial table with a zero write rate"},
		{nil, "null message", "an empty catalog becoming an all-zero table"},
		{append(without(LineStorageGBHour), CatalogEntry{LineStorageGBHour, "GB-Months", d("0.0811111030")}), "GB-Months", "silently rescaling a restated unit"},
		{append(recorded(), CatalogEntry{LineVCPUSecond, "vCPU-Seconds", d("0.00003")}), "2 products", "picking the first of two products"},
	}
	for _, r := range refusals {
		_, err := FromCatalog(client.USEast1, "test", fresh, r.entries)
		if err == nil || !strings.Contains(err.Error(), r.must) {
			t.Errorf("want refusal containing %q, got %v (catches: %s)", r.must, err, r.catches)
			continue
		}
		if client.KindOf(err).String() != "InvalidArg" || !strings.Contains(err.Error(), "What is billed") {
			t.Errorf("refusal must be InvalidArg naming the finding: %v", err)
		}
	}
}

// Running vs suspended, 2048 class, us-east-1.
//
// Per second running: 1 × 0.0000276944 + 2 × 0.0000036667 = 0.0000350278.
// Per cycle: 2 × (0.0037977138 + 0.0015467699) = 0.0106889674.
// Suspended storage inside the one-week floor is the floor itself:
// 2 GB × 168 h × 0.0001111111 = 0.0373333296.
// Break-even t: 0.0000350278 × t = 0.0106889674 + 0.0373333296 = 0.0480222970,
// t = 1370.98 s, inside the 604800 s floor, so the constant branch holds;
// rounded up to the nanosecond it is 22m50.98s.
//
// Over a 730-hour month: running = 2628000 × 0.0000350278 = 92.0530584;
// suspended = 0.162222206 + 0.0106889674 = 0.1729111734; ratio ≈ 532.37.
func TestResidency(t *testing.T) {
	r, err := CompareResidency(class(t, 2048), 730*time.Hour, 1, Pinned(client.USEast1), fresh)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "per cycle", r.PerCycle(), d("0.0106889674"))
	eq(t, "running month", r.Running.Total().Floor(), d("92.0530584"))
	eq(t, "suspended month", r.Suspended.Total().Floor(), d("0.1729111734"))
	eq(t, "ratio", r.Ratio(), d("532.3719"))
	be, err := r.BreakEven()
	if err != nil {
		t.Fatal(err)
	}
	// Catches: ignoring the retention floor in the break-even (churn alone
	// gives 305 s), or ignoring churn (the floor alone gives 1066 s).
	if be < 1370*time.Second || be > 1371*time.Second {
		t.Errorf("break-even = %s, want ≈1370.98s", be)
	}
	if r.Hold.Provenance() != Projected {
		t.Error("a comparison's hold is projected")
	}
	if !strings.Contains(r.String(), "break-even") {
		t.Error("rendered comparison names the break-even")
	}
	if _, err := CompareResidency(class(t, 2048), time.Hour, 1, Pinned(client.EUWest1), fresh); err == nil {
		t.Error("an unpriced table cannot be compared")
	}
}
