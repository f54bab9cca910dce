// Package cost attributes what a MicroVM run cost, or what a plan will cost, to
// the line items AWS bills: baseline vCPU-seconds and GB-seconds, snapshot
// reads and writes, and snapshot and image storage.
//
// Money is decimal.Decimal from end to end. A float enters at one named
// boundary (a size class's vCPU figure, converted once) and there is no method
// that turns an estimate into a float. Every duration says whether it was
// measured or projected. A line with no published rate (the image build) is an
// Unpriced value carrying its reason, and a total that contains one is a lower
// bound naming it.
//
// It must never read the peak of a size class, never price compute from an x86
// rate, never present an unknown as $0, and never claim a figure is a bill:
// every amount here is an estimate from a dated rate table, and a report from
// a table older than StaleAfter says so.
package cost
