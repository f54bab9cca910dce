package cost

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
)

// Phase is a part of a sandbox's life that costs money.
type Phase string

// The phases, in lifecycle order.
const (
	PhaseImageBuild   Phase = "image-build"
	PhaseImageStorage Phase = "image-storage"
	PhaseLaunch       Phase = "launch"
	PhaseRunning      Phase = "running"
	PhaseSuspended    Phase = "suspended"
	PhaseSuspend      Phase = "suspend"
	PhaseResume       Phase = "resume"
)

// Billing is the AWS line item a Line is billed under, kept as separate as
// AWS keeps them (vCPU and memory are two lines, never one blended figure).
type Billing string

// The billing lines. A Line with no published rate has Billing "".
const (
	BillVCPU            Billing = "vcpu"
	BillMemory          Billing = "memory"
	BillSnapshotStorage Billing = "snapshot-storage"
	BillSnapshotRead    Billing = "snapshot-read"
	BillSnapshotWrite   Billing = "snapshot-write"
)

// BuildUnpricedReason is why the image build line has no price.
const BuildUnpricedReason = "AWS does not publish whether the server-side image build is billed; it runs a real MicroVM, so it is unknown, not free"

// Line is one phase's one billed quantity and what it costs. Quantity and
// Unit are kept so a reader can redo the arithmetic from the rate table.
type Line struct {
	Phase    Phase
	Billing  Billing
	Quantity decimal.Decimal
	Unit     string
	Amount   Amount
	Duration Duration // zero for a line with no time component
	Note     string
}

func (l Line) String() string {
	s := fmt.Sprintf("%-14s %-16s %s %s  %s", l.Phase, l.Billing, l.Quantity.String(), l.Unit, l.Amount)
	if l.Note != "" {
		s += "  [" + l.Note + "]"
	}
	return s
}

// Report is the line items for one sandbox, computed against the rate table
// it carries so it stays reproducible after the pinned table changes.
type Report struct {
	Label     string
	Size      client.SizeClass
	Rates     RateTable
	Lines     []Line
	Staleness string // non-empty when Rates was older than StaleAfter
}

// Total sums a report: the priced lines exactly, and the unpriced ones by
// name. With any unpriced line it is a lower bound.
type Total struct {
	floor    decimal.Decimal
	unpriced []Line
}

// Floor is the sum of the priced lines. When IsLowerBound, the true total is
// at least this and the unpriced lines say what is missing.
func (t Total) Floor() decimal.Decimal { return t.floor }

// IsLowerBound reports whether some line had no price.
func (t Total) IsLowerBound() bool { return len(t.unpriced) > 0 }

// UnpricedLines are the lines the floor leaves out.
func (t Total) UnpricedLines() []Line { return t.unpriced }

func (t Total) String() string {
	if !t.IsLowerBound() {
		return FormatUSD(t.floor)
	}
	names := make([]string, len(t.unpriced))
	for i, l := range t.unpriced {
		names[i] = string(l.Phase) + ": " + l.Amount.UnpricedReason()
	}
	return "at least " + FormatUSD(t.floor) + ", plus unpriced " + strings.Join(names, "; ")
}

// Total sums the report; see Total.
func (r Report) Total() Total {
	var t Total
	for _, l := range r.Lines {
		if usd, ok := l.Amount.Estimate(); ok {
			t.floor = t.floor.Add(usd)
		} else {
			t.unpriced = append(t.unpriced, l)
		}
	}
	return t
}

// FullyMeasured reports whether every timed line was measured.
func (r Report) FullyMeasured() bool {
	for _, l := range r.Lines {
		if l.Duration.Provenance() == Projected {
			return false
		}
	}
	return true
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s in %s\n", r.Label, r.Size, r.Rates.Region())
	if r.Staleness != "" {
		fmt.Fprintf(&b, "warning: %s\n", r.Staleness)
	}
	for _, l := range r.Lines {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Fprintf(&b, "  total: %s", r.Total())
	return b.String()
}

// Usage is what happened to one sandbox. A zero Duration or a zero size means
// the phase did not happen.
type Usage struct {
	Running   Duration // wall time in RUNNING, billed at baseline busy or idle
	Suspended Duration // time held suspended: snapshot storage only
	// ImageBuild is how long the build took, if timed. Whenever ImageGB is set
	// a build line appears, Unpriced, timed or not.
	ImageBuild    Duration
	ImageGB       decimal.Decimal // stored image size; zero when an existing image was reused
	ImageRetained Duration        // how long the image was kept; zero means the one-week floor, projected
	Cycles        int             // suspend/resume cycles, each a snapshot write plus a read
	// Unresumed says the sandbox ended suspended: its last suspend wrote a
	// snapshot that no resume read (a warm pool's member never handed out).
	Unresumed bool
	// SnapshotGB is the suspend snapshot's size; zero means the baseline
	// memory, which is what the measured worked figures use.
	SnapshotGB decimal.Decimal
	Launched   bool // a launch reads a snapshot
}

// baselineOf is the package's one float boundary: the generated size table
// states vCPU as a float, converted here exactly once (0.25 is exact).
func baselineOf(size client.SizeClass) (vcpu, gb decimal.Decimal) {
	vcpu = decimal.NewFromFloat(size.BaselineVCPU())
	gb = decimal.NewFromInt(int64(size.BaselineMiB())).Div(decimal.NewFromInt(1024))
	return vcpu, gb
}

// RunReport attributes usage to line items for a sandbox of size, priced
// from rates. now decides staleness and is a parameter so a report is a pure
// function of its inputs.
func RunReport(label string, size client.SizeClass, usage Usage, rates RateTable, now time.Time) (Report, error) {
	if size.IsZero() {
		return Report{}, errors.New("cost: no size class")
	}
	if usage.Cycles < 0 || usage.ImageGB.IsNegative() || usage.SnapshotGB.IsNegative() {
		return Report{}, errors.New("cost: negative cycles or size")
	}
	vcpu, baseGB := baselineOf(size)
	snapshot := usage.SnapshotGB
	if snapshot.IsZero() {
		snapshot = baseGB
	}
	p := pricer{rates: rates}
	var lines []Line
	if usage.ImageGB.IsPositive() || !usage.ImageBuild.IsZero() {
		lines = append(lines, buildLine(usage.ImageBuild))
	}
	if usage.ImageGB.IsPositive() {
		held := usage.ImageRetained
		if held.IsZero() {
			held = Duration{d: MinimumRetention, p: Projected}
		}
		lines = append(lines, p.storage(PhaseImageStorage, usage.ImageGB, held))
	}
	if usage.Launched {
		// Which snapshot a launch reads is undocumented: the image's size when
		// one is named, the memory footprint otherwise.
		gb := snapshot
		if usage.ImageGB.IsPositive() {
			gb = usage.ImageGB
		}
		lines = append(lines, p.transfer(PhaseLaunch, BillSnapshotRead, gb, 1))
	}
	if !usage.Running.IsZero() {
		lines = append(lines, p.compute(vcpu, baseGB, usage.Running)...)
	}
	if !usage.Suspended.IsZero() {
		// Storage only, and no compute line multiplied by zero: a suspended VM
		// is frozen.
		lines = append(lines, p.storage(PhaseSuspended, snapshot, usage.Suspended))
	}
	writes := usage.Cycles
	if usage.Unresumed {
		writes++
	}
	if writes > 0 {
		lines = append(lines, p.transfer(PhaseSuspend, BillSnapshotWrite, snapshot, writes))
	}
	if usage.Cycles > 0 {
		lines = append(lines, p.transfer(PhaseResume, BillSnapshotRead, snapshot, usage.Cycles))
	}
	return Report{Label: label, Size: size, Rates: rates, Lines: lines, Staleness: rates.Staleness(now)}, nil
}

// Plan is a sandbox's intended phases in plain durations. Estimate marks
// every one of them projected; there is no field a measured duration could
// be written into.
type Plan struct {
	Running       time.Duration
	Suspended     time.Duration
	ImageGB       decimal.Decimal
	ImageRetained time.Duration
	Cycles        int
	SnapshotGB    decimal.Decimal
	Launched      bool
}

// Estimate prices a plan before anything is spent. Every duration in the
// report is projected.
func Estimate(label string, size client.SizeClass, plan Plan, rates RateTable, now time.Time) (Report, error) {
	projected := func(d time.Duration) (Duration, error) {
		if d == 0 {
			return Duration{}, nil
		}
		return ProjectedDuration(d)
	}
	var u Usage
	var err error
	if u.Running, err = projected(plan.Running); err != nil {
		return Report{}, err
	}
	if u.Suspended, err = projected(plan.Suspended); err != nil {
		return Report{}, err
	}
	if u.ImageRetained, err = projected(plan.ImageRetained); err != nil {
		return Report{}, err
	}
	u.ImageGB, u.Cycles, u.SnapshotGB, u.Launched = plan.ImageGB, plan.Cycles, plan.SnapshotGB, plan.Launched
	return RunReport(label, size, u, rates, now)
}

type pricer struct{ rates RateTable }

func (p pricer) price(qty, rate decimal.Decimal) Amount {
	if !p.rates.Priced() {
		return Unpriced(p.rates.UnpricedReason())
	}
	return Estimated(qty.Mul(rate))
}

// compute is two lines from the baseline, never the peak.
func (p pricer) compute(vcpu, gb decimal.Decimal, d Duration) []Line {
	sec := d.Seconds()
	vq, mq := vcpu.Mul(sec), gb.Mul(sec)
	return []Line{
		{Phase: PhaseRunning, Billing: BillVCPU, Quantity: vq, Unit: "vCPU-seconds", Amount: p.price(vq, p.rates.VCPUSecond()),
			Duration: d, Note: vcpu.String() + " vCPU baseline"},
		{Phase: PhaseRunning, Billing: BillMemory, Quantity: mq, Unit: "GB-seconds", Amount: p.price(mq, p.rates.GBSecond()),
			Duration: d, Note: gb.String() + " GB baseline"},
	}
}

var secondsPerHour = decimal.NewFromInt(3600)

// storage is GB-hours at the per-GB-hour rate, with the one-week minimum
// retention applied. The floor is documented for images; a suspend snapshot
// released early is billed at the same storage rate row, so the floor is
// applied to it too and the note says so.
func (p pricer) storage(phase Phase, gb decimal.Decimal, held Duration) Line {
	billed := held.Seconds()
	note := gb.String() + " GB held " + held.String()
	if floor := decimal.NewFromInt(int64(MinimumRetention / time.Second)); billed.LessThan(floor) {
		billed = floor
		note += fmt.Sprintf("; billed the %d-day minimum retention instead", int(MinimumRetention/(24*time.Hour)))
	}
	q := gb.Mul(billed).Div(secondsPerHour)
	return Line{Phase: phase, Billing: BillSnapshotStorage, Quantity: q, Unit: "GB-hours",
		Amount: p.price(q, p.rates.StorageGBHour()), Duration: held, Note: note}
}

// transfer is a snapshot write or read, per GB moved, with no time component.
func (p pricer) transfer(phase Phase, b Billing, gb decimal.Decimal, count int) Line {
	rate := p.rates.SnapshotReadGB()
	if b == BillSnapshotWrite {
		rate = p.rates.SnapshotWriteGB()
	}
	q := gb.Mul(decimal.NewFromInt(int64(count)))
	return Line{Phase: phase, Billing: b, Quantity: q, Unit: "GB", Amount: p.price(q, rate),
		Note: fmt.Sprintf("%d x %s GB", count, gb)}
}

func buildLine(d Duration) Line {
	unit := "seconds"
	if d.IsZero() {
		unit = "seconds (untimed)"
	}
	return Line{Phase: PhaseImageBuild, Quantity: d.Seconds(), Unit: unit, Amount: Unpriced(BuildUnpricedReason), Duration: d,
		Note: "unknown, not zero"}
}
