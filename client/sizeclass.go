package client

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// sizeTable is the generated table the accessors read. A variable rather than
// a direct reference so a test can hand the accessors a table whose peak is
// not four times its baseline and prove the peak is read, not computed.
var sizeTable = taxonomy.SizeClasses

// SizeClass is one documented row of baseline and peak. minimumMemoryInMiB
// selects a class by its baseline; the guest reports the peak; billing follows
// the baseline. Only SizeClassFromBaseline, DefaultSizeClass and SizeClasses
// make one; the zero SizeClass is no class and reports zeros.
type SizeClass struct {
	idx uint8 // index into sizeTable, plus one, so the zero value is invalid
}

// SizeClasses lists every documented class, smallest first.
func SizeClasses() []SizeClass {
	out := make([]SizeClass, len(sizeTable))
	for i := range sizeTable {
		out[i] = SizeClass{idx: uint8(i + 1)}
	}
	return out
}

// DefaultSizeClass is the class the platform uses when none is chosen.
func DefaultSizeClass() SizeClass {
	c, err := SizeClassFromBaseline(taxonomy.DefaultBaselineMiB)
	if err != nil {
		panic("gen/taxonomy: DefaultBaselineMiB is not a row of SizeClasses")
	}
	return c
}

// SizeClassFromBaseline selects the class whose baseline is exactly mib. An
// off-table figure (1500, say) is refused, never snapped to a neighbour, and
// so is a figure that is only some class's peak (16384): the field picks a
// class, it does not size a VM.
func SizeClassFromBaseline(mib int) (SizeClass, error) {
	for i, row := range sizeTable {
		if row.BaselineMiB == mib {
			return SizeClass{idx: uint8(i + 1)}, nil
		}
	}
	offered := make([]string, len(sizeTable))
	for i, row := range sizeTable {
		offered[i] = strconv.Itoa(row.BaselineMiB)
	}
	hint := ""
	for _, row := range sizeTable {
		if row.PeakMiB == mib {
			hint = fmt.Sprintf("; %d MiB is the peak of the %d MiB class, which is what the guest reports, not what is requested", mib, row.BaselineMiB)
			break
		}
	}
	return SizeClass{}, Errorf(taxonomy.KindInvalidArg, taxonomy.SizeClassFinding,
		"minimumMemoryInMiB=%d is not a documented size class baseline; pass one of %s MiB exactly (the value selects a class and is not rounded)%s",
		mib, strings.Join(offered, ", "), hint)
}

func (c SizeClass) row() taxonomy.SizeRow {
	if c.idx == 0 || int(c.idx) > len(sizeTable) {
		return taxonomy.SizeRow{}
	}
	return sizeTable[c.idx-1]
}

// IsZero reports whether c is the zero SizeClass, which names no class.
func (c SizeClass) IsZero() bool { return c.idx == 0 }

// BaselineMiB is the memory billed while running and the value sent as
// minimumMemoryInMiB.
func (c SizeClass) BaselineMiB() int { return c.row().BaselineMiB }

// BaselineVCPU is the vCPU billed while running.
func (c SizeClass) BaselineVCPU() float64 { return c.row().BaselineVCPU }

// PeakMiB is the burst ceiling, the MemTotal the guest reports.
func (c SizeClass) PeakMiB() int { return c.row().PeakMiB }

// PeakVCPU is the burst vCPU ceiling.
func (c SizeClass) PeakVCPU() float64 { return c.row().PeakVCPU }

// String names both the baseline and the peak, because naming only one
// invites budgeting for the wrong number.
func (c SizeClass) String() string {
	if c.IsZero() {
		return "no size class"
	}
	r := c.row()
	return fmt.Sprintf("%d MiB / %s vCPU baseline (billed while running), peak %d MiB / %s vCPU (what the guest reports)",
		r.BaselineMiB, strconv.FormatFloat(r.BaselineVCPU, 'f', -1, 64),
		r.PeakMiB, strconv.FormatFloat(r.PeakVCPU, 'f', -1, 64))
}
