package cost

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// StaleAfter is how old a rate table may be before every report computed from
// it carries a warning. Ninety days is the order on which AWS has restructured
// Lambda pricing; the warning costs one line when nothing changed.
const StaleAfter = 90 * 24 * time.Hour

// MinimumRetention is the billed floor on anything held at the snapshot
// storage rate: an image deleted a minute after creation bills a week.
const MinimumRetention = time.Duration(taxonomy.ImageRetentionMinSec) * time.Second

// hoursPerMonth is AWS's billing month; the GB-month storage figure is the
// per-GB-hour rate the Pricing API quotes times this.
var hoursPerMonth = decimal.NewFromInt(taxonomy.HoursPerMonth)

// RateTable is the ARM rates for one region, with the date they were read.
// Its fields are unexported and there are two ways to get one: Pinned, and
// FromCatalog, which refuses a catalog missing an ARM line rather than
// falling back to the x86 rate (17.9% higher; MicroVMs are ARM64-only). A
// table for a region with no known figures prices every line as Unpriced.
type RateTable struct {
	region    client.Region
	source    string
	retrieved time.Time
	unpriced  string // non-empty: no figures, and this is why
	r         rateRow
}

type rateRow struct {
	vcpuSecond      decimal.Decimal // Lambda-MicroVM-vCPU-Second-ARM, per vCPU-second
	gbSecond        decimal.Decimal // Lambda-MicroVM-Memory-GB-Second-ARM, per GB-second
	storageGBHour   decimal.Decimal // Lambda-MicroVM-Snapshot-Storage-GB-Hour, per GB-hour
	snapshotReadGB  decimal.Decimal // Lambda-MicroVM-Snapshot-Read-GB, per GB
	snapshotWriteGB decimal.Decimal // Lambda-MicroVM-Snapshot-Write-GB, per GB
}

// pinnedRetrieved is when the pinned figures were read from the AWS Pricing
// API (docs/PLATFORM.md of the reference, "What actually costs money").
var pinnedRetrieved = time.Date(2026, 8, 7, 0, 0, 0, 0, time.UTC)

const pinnedSource = "AWS Pricing API, ServiceCode AWSLambda, usage types containing MicroVM"

func mustDec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// usEast1 are the seven-line catalog's ARM and snapshot figures as the Pricing
// API returned them for us-east-1. us-east-2 and us-west-2 were identical on
// every line item when read.
var usEast1 = rateRow{
	vcpuSecond:      mustDec("0.0000276944"),
	gbSecond:        mustDec("0.0000036667"),
	storageGBHour:   mustDec("0.0001111111"),
	snapshotReadGB:  mustDec("0.0015467699"),
	snapshotWriteGB: mustDec("0.0037977138"),
}

// apNortheast1 are the Tokyo figures recorded by the reference, which agree
// with its regional table: compute +16.4%, read +19.9%, write +22.6%,
// storage +20.0% over us-east-1.
var apNortheast1 = rateRow{
	vcpuSecond:      mustDec("0.0000322421"),
	gbSecond:        mustDec("0.0000042688"),
	storageGBHour:   mustDec("0.0001333333"),
	snapshotReadGB:  mustDec("0.0018548941"),
	snapshotWriteGB: mustDec("0.0046556039"),
}

// euWest1Unpriced explains why eu-west-1 has no pinned figures: only rounded
// percentages were recorded, and a rate rebuilt from a rounded percentage is
// a guess with a plausible number of digits.
const euWest1Unpriced = "eu-west-1's MicroVM rates were recorded only as rounded percentages over us-east-1 (compute +5.3%, snapshot read +6.0%, write +7.0%, storage +19.0%), not as Pricing API figures; build a table with cost.FromCatalog from a fetched catalog"

// Pinned is the rate table this package ships for region. The five
// supported regions each have one; eu-west-1's and an unlisted region's price
// every line as Unpriced with the reason, because no figure was recorded.
func Pinned(region client.Region) RateTable {
	t := RateTable{region: region, source: pinnedSource, retrieved: pinnedRetrieved}
	switch region {
	case client.USEast1, client.USEast2, client.USWest2:
		t.r = usEast1
	case client.APNortheast1:
		t.r = apNortheast1
	case client.EUWest1:
		t.unpriced = euWest1Unpriced
	default:
		t.unpriced = fmt.Sprintf("no MicroVM rates are known for region %q; a region that does not price MicroVMs does not run them either", region)
	}
	return t
}

// Region is the region these rates price.
func (t RateTable) Region() client.Region { return t.region }

// Source says where the figures came from.
func (t RateTable) Source() string { return t.source }

// Retrieved is the day the figures were read.
func (t RateTable) Retrieved() time.Time { return t.retrieved }

// Priced reports whether the table has figures; when it has none,
// UnpricedReason says why and every line computed from it is Unpriced.
func (t RateTable) Priced() bool { return t.unpriced == "" && !t.region.IsZero() }

// UnpricedReason is why the table has no figures, or "".
func (t RateTable) UnpricedReason() string {
	if t.region.IsZero() && t.unpriced == "" {
		return "no rate table was chosen"
	}
	return t.unpriced
}

// VCPUSecond is the ARM rate per vCPU-second.
func (t RateTable) VCPUSecond() decimal.Decimal { return t.r.vcpuSecond }

// GBSecond is the ARM rate per GB-second of baseline memory.
func (t RateTable) GBSecond() decimal.Decimal { return t.r.gbSecond }

// StorageGBHour is the snapshot storage rate as the Pricing API quotes it.
func (t RateTable) StorageGBHour() decimal.Decimal { return t.r.storageGBHour }

// StorageGBMonth is StorageGBHour at AWS's 730-hour month, the figure a
// pricing page would show. Derived, never pinned: a pinned monthly figure was
// once a round 0.08 that understated storage by 1.37%.
func (t RateTable) StorageGBMonth() decimal.Decimal { return t.r.storageGBHour.Mul(hoursPerMonth) }

// SnapshotReadGB is the rate per GB read on a launch or resume.
func (t RateTable) SnapshotReadGB() decimal.Decimal { return t.r.snapshotReadGB }

// SnapshotWriteGB is the rate per GB written on a suspend.
func (t RateTable) SnapshotWriteGB() decimal.Decimal { return t.r.snapshotWriteGB }

// Age is how long before now the figures were read.
func (t RateTable) Age(now time.Time) time.Duration { return now.Sub(t.retrieved) }

// Staleness is a warning when the table is older than StaleAfter at now, or "".
func (t RateTable) Staleness(now time.Time) string {
	if !t.Priced() || t.Age(now) <= StaleAfter {
		return ""
	}
	return fmt.Sprintf("the %s rate table was read %s, %d days ago (stale after %d); re-read the %s before trusting these figures",
		t.region, t.retrieved.Format(time.DateOnly), int(t.Age(now)/(24*time.Hour)), int(StaleAfter/(24*time.Hour)), t.source)
}

// CatalogLine names one priced line of the Pricing API's MicroVM catalog by
// its region-independent group (usage types carry a location prefix outside
// us-east-1, so they cannot be compared across regions; groups can).
type CatalogLine string

// The five catalog lines a RateTable needs, all ARM where an architecture
// applies.
const (
	LineVCPUSecond      CatalogLine = "AWS-Lambda-MicroVM-vCPU-Second-ARM"
	LineMemoryGBSecond  CatalogLine = "AWS-Lambda-MicroVM-Memory-GB-Second-ARM"
	LineStorageGBHour   CatalogLine = "AWS-Lambda-MicroVM-Snapshot-Storage-GB-Hour"
	LineSnapshotReadGB  CatalogLine = "AWS-Lambda-MicroVM-Snapshot-Read-GB"
	LineSnapshotWriteGB CatalogLine = "AWS-Lambda-MicroVM-Snapshot-Write-GB"
)

var catalogLines = []struct {
	line CatalogLine
	unit string
	x86  CatalogLine // the x86 sibling that must never be substituted
}{
	{LineVCPUSecond, "vCPU-Seconds", "AWS-Lambda-MicroVM-vCPU-Second"},
	{LineMemoryGBSecond, "GB-Seconds", "AWS-Lambda-MicroVM-Memory-GB-Second"},
	{LineStorageGBHour, "GB-Hours", ""},
	{LineSnapshotReadGB, "GB", ""},
	{LineSnapshotWriteGB, "GB", ""},
}

// CatalogEntry is one priced line as a rate source states it.
type CatalogEntry struct {
	Group CatalogLine
	Unit  string
	USD   decimal.Decimal
}

// FromCatalog builds a table for region from a fetched catalog, all or
// nothing. It refuses a catalog missing an ARM compute line even when the x86
// sibling is present, a restated unit, two products for one line, and an
// empty catalog (which means the region does not price MicroVMs).
func FromCatalog(region client.Region, source string, retrieved time.Time, entries []CatalogEntry) (RateTable, error) {
	refuse := func(format string, args ...any) (RateTable, error) {
		return RateTable{}, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingWhatCostsMoney, format, args...)
	}
	if len(entries) == 0 {
		return refuse("the rate catalog for %s has no MicroVM line items at all; a region that does not price MicroVMs does not run them, and answers AccessDeniedException with a null message", region)
	}
	var got [5]decimal.Decimal
	for i, want := range catalogLines {
		var match []CatalogEntry
		var x86 *CatalogEntry
		for j := range entries {
			switch entries[j].Group {
			case want.line:
				match = append(match, entries[j])
			case want.x86:
				if want.x86 != "" {
					x86 = &entries[j]
				}
			}
		}
		switch {
		case len(match) == 0 && x86 != nil:
			return refuse("the %s catalog has no %s, only the x86 line %s at $%s; MicroVMs are ARM64-only, so the x86 rate never applies and is not substituted (it would overstate compute by about 18%%)",
				region, want.line, want.x86, x86.USD)
		case len(match) == 0:
			return refuse("the %s catalog has no %s line", region, want.line)
		case len(match) > 1:
			return refuse("the %s catalog has %d products for %s; picking one would silently select a rate", region, len(match), want.line)
		case match[0].Unit != want.unit:
			return refuse("%s in %s is quoted per %q, not %q; converting it would produce plausible wrong figures", want.line, region, match[0].Unit, want.unit)
		case match[0].USD.IsNegative():
			return refuse("%s in %s has a negative rate %s", want.line, region, match[0].USD)
		}
		got[i] = match[0].USD
	}
	return RateTable{
		region: region, source: source, retrieved: retrieved,
		r: rateRow{vcpuSecond: got[0], gbSecond: got[1], storageGBHour: got[2], snapshotReadGB: got[3], snapshotWriteGB: got[4]},
	}, nil
}

func (t RateTable) String() string {
	if !t.Priced() {
		return fmt.Sprintf("%s: unpriced (%s)", t.region, t.UnpricedReason())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s rates read %s (%s), ARM:\n", t.region, t.retrieved.Format(time.DateOnly), t.source)
	fmt.Fprintf(&b, "  vCPU-second      %s\n", t.VCPUSecond())
	fmt.Fprintf(&b, "  GB-second        %s\n", t.GBSecond())
	fmt.Fprintf(&b, "  storage GB-hour  %s (GB-month %s at %d h)\n", t.StorageGBHour(), t.StorageGBMonth(), taxonomy.HoursPerMonth)
	fmt.Fprintf(&b, "  snapshot read GB %s\n", t.SnapshotReadGB())
	fmt.Fprintf(&b, "  snapshot write GB %s", t.SnapshotWriteGB())
	return b.String()
}
