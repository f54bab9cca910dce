package client

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// requireRefusal asserts err is a local InvalidArg refusal naming finding,
// with the finding's title in the message.
func requireRefusal(t *testing.T, err error, finding taxonomy.FindingID) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error, got %T %v", err, err)
	}
	if e.Kind() != taxonomy.KindInvalidArg {
		t.Errorf("kind = %v, want InvalidArg", e.Kind())
	}
	if e.Finding() != finding {
		t.Errorf("finding = %q, want %q", e.Finding(), finding)
	}
	if title := finding.Title(); title == "" || !strings.Contains(e.Error(), title) {
		t.Errorf("message does not carry the finding title %q: %s", title, e.Error())
	}
	if _, ok := e.WireKind(); ok {
		t.Errorf("a local refusal has no wire kind")
	}
	return e
}

func TestParseRegion(t *testing.T) {
	tests := []struct {
		in   string
		want Region
		ok   bool
		// catches names the plausible wrong edit this row turns red.
		catches string
	}{
		{"us-east-1", USEast1, true, "dropping a measured region from the table"},
		{"us-east-2", USEast2, true, "dropping a measured region from the table"},
		{"us-west-2", USWest2, true, "dropping a measured region from the table"},
		{"eu-west-1", EUWest1, true, "dropping a measured region from the table"},
		{"ap-northeast-1", APNortheast1, true, "dropping a measured region from the table"},
		{"eu-central-1", Region{}, false, "accepting any AWS region (it answers AccessDenied with a null message)"},
		{"ap-southeast-2", Region{}, false, "accepting any AWS region"},
		{"sa-east-1", Region{}, false, "accepting any AWS region"},
		{"us-west-1", Region{}, false, "accepting a prefix match on us-"},
		{"us-east-3", Region{}, false, "accepting a prefix match on us-east-"},
		{"US-EAST-1", Region{}, false, "case-folding the input"},
		{"us-east-1 ", Region{}, false, "trimming whitespace silently"},
		{"", Region{}, false, "treating empty as the default region"},
	}
	for _, tt := range tests {
		got, err := ParseRegion(tt.in)
		if tt.ok {
			if err != nil || got != tt.want || !got.Supported() {
				t.Errorf("ParseRegion(%q) = %v, %v; want %v (catches: %s)", tt.in, got, err, tt.want, tt.catches)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseRegion(%q) accepted (catches: %s)", tt.in, tt.catches)
			continue
		}
		e := requireRefusal(t, err, taxonomy.FindingUnsupportedRegion)
		for _, must := range []string{"AccessDeniedException", "null", "UnlistedRegion"} {
			if !strings.Contains(e.Error(), must) {
				t.Errorf("refusal of %q lacks %q: %s", tt.in, must, e)
			}
		}
		if !got.IsZero() {
			t.Errorf("a refused region must come back zero, got %v", got)
		}
	}
}

// Catches: exported region values drifting from the generated table (a sixth
// row added to errors.yaml without a value here, or a typo in a value).
func TestRegionValuesMatchTable(t *testing.T) {
	vals := []Region{USEast1, USEast2, USWest2, EUWest1, APNortheast1}
	if !reflect.DeepEqual(Regions(), vals) {
		t.Fatalf("Regions() = %v, want %v", Regions(), vals)
	}
	if len(vals) != 5 {
		t.Fatalf("five measured regions, got %d", len(vals))
	}
}

func TestUnlistedRegion(t *testing.T) {
	// Catches: the escape hatch producing an unlisted value for a supported name,
	// which would then compare unequal to USEast1 and lose its rate table.
	if UnlistedRegion("us-east-1") != USEast1 || !UnlistedRegion("ap-northeast-1").Supported() {
		t.Fatal("a supported name must normalise to its listed value")
	}
	// Catches: the escape hatch being indistinguishable from a supported region.
	r := UnlistedRegion("eu-central-1")
	if r.Supported() || r.String() != "eu-central-1" || r.IsZero() {
		t.Fatalf("UnlistedRegion(eu-central-1) = %#v", r)
	}
	// Catches: the zero value passing as a region.
	if (Region{}).Supported() || !(Region{}).IsZero() {
		t.Fatal("zero Region must not be supported")
	}
}

func TestSizeClassFromBaseline(t *testing.T) {
	ok := []struct {
		mib                int
		peakMiB            int
		baseVCPU, peakVCPU float64
		catches            string
	}{
		{512, 2048, 0.25, 1, "computing vCPU as MiB/1024 (0.5 instead of 0.25)"},
		{1024, 4096, 0.5, 2, "an off-by-one index into the table"},
		{2048, 8192, 1, 4, "returning the default for every input"},
		{4096, 16384, 2, 8, "an off-by-one index into the table"},
		{8192, 32768, 4, 16, "dropping the largest row"},
	}
	for _, tt := range ok {
		c, err := SizeClassFromBaseline(tt.mib)
		if err != nil {
			t.Fatalf("%d refused: %v (catches: %s)", tt.mib, err, tt.catches)
		}
		if c.BaselineMiB() != tt.mib || c.PeakMiB() != tt.peakMiB || c.BaselineVCPU() != tt.baseVCPU || c.PeakVCPU() != tt.peakVCPU {
			t.Errorf("%d: got %s (catches: %s)", tt.mib, c, tt.catches)
		}
	}
	refused := []struct {
		mib     int
		catches string
	}{
		{1500, "snapping 1500 to 2048 (or 1024) instead of refusing"},
		{1536, "snapping to the nearest class"},
		{3072, "rounding up to the next class"},
		{513, "accepting anything at least the smallest baseline"},
		{511, "rounding up to the smallest class"},
		{0, "treating 0 as 'use the default'"},
		{-512, "taking the absolute value"},
		{16384, "accepting a peak that is not also a baseline"},
		{32768, "accepting a peak that is not also a baseline"},
		{8191, "an inclusive/exclusive range check instead of equality"},
	}
	for _, tt := range refused {
		c, err := SizeClassFromBaseline(tt.mib)
		if err == nil {
			t.Errorf("%d accepted as %s (catches: %s)", tt.mib, c, tt.catches)
			continue
		}
		e := requireRefusal(t, err, taxonomy.FindingMemorySelectsBaseline)
		if !strings.Contains(e.Error(), "512, 1024, 2048, 4096, 8192") {
			t.Errorf("refusal must offer the baselines: %s", e)
		}
	}
	// Catches: a peak-only refusal that does not explain it is a peak.
	_, err := SizeClassFromBaseline(16384)
	if !strings.Contains(err.Error(), "peak of the 4096 MiB class") {
		t.Errorf("16384 refusal should say it is the 4096 class's peak: %v", err)
	}
}

// Catches: computing peak as 4×baseline (every shipped row is 4×, so only a
// table that breaks the pattern tells the two implementations apart).
func TestSizeClassPeakIsReadNotComputed(t *testing.T) {
	saved := sizeTable
	t.Cleanup(func() { sizeTable = saved })
	sizeTable = append([]taxonomy.SizeRow(nil), saved...)
	sizeTable[2].PeakMiB, sizeTable[2].PeakVCPU = 9000, 3.5
	c, err := SizeClassFromBaseline(2048)
	if err != nil {
		t.Fatal(err)
	}
	if c.PeakMiB() != 9000 || c.PeakVCPU() != 3.5 {
		t.Fatalf("peak = %d MiB / %v vCPU, want 9000 / 3.5 from the table", c.PeakMiB(), c.PeakVCPU())
	}
}

func TestSizeClassStringAndDefault(t *testing.T) {
	c := DefaultSizeClass()
	// Catches: a default hard-coded to another row than the generated one.
	if c.BaselineMiB() != taxonomy.DefaultBaselineMiB || c.BaselineMiB() != 2048 {
		t.Fatalf("default = %s", c)
	}
	// Catches: String naming only one of the two numbers.
	s := c.String()
	for _, must := range []string{"2048 MiB", "1 vCPU", "8192 MiB", "4 vCPU", "baseline", "peak"} {
		if !strings.Contains(s, must) {
			t.Errorf("String() = %q lacks %q", s, must)
		}
	}
	// Catches: the zero value reporting the default row's numbers.
	if z := (SizeClass{}); z.BaselineMiB() != 0 || z.PeakMiB() != 0 || !z.IsZero() {
		t.Error("zero SizeClass must report no row")
	}
	if len(SizeClasses()) != 5 {
		t.Error("five size classes")
	}
}

func TestHookTimeouts(t *testing.T) {
	run := []struct {
		sec     int
		ok      bool
		catches string
	}{
		{1, true, "an exclusive lower bound"},
		{60, true, "an exclusive upper bound (60 is the ceiling, inclusive)"},
		{61, false, "an off-by-one ceiling"},
		{0, false, "accepting 0 as 'default'"},
		{-1, false, "no lower bound"},
		{300, false, "sharing the 3600 s build ceiling with the run family"},
		{3600, false, "sharing the 3600 s build ceiling with the run family"},
		{316, false, "uint8 wraparound (316 mod 256 = 60) before the range check"},
	}
	for _, tt := range run {
		v, err := NewRunHookTimeout(tt.sec)
		if tt.ok != (err == nil) {
			t.Errorf("NewRunHookTimeout(%d) err=%v (catches: %s)", tt.sec, err, tt.catches)
			continue
		}
		if err != nil {
			e := requireRefusal(t, err, hookTimeoutFinding)
			if !strings.Contains(e.Error(), "1..60") || !strings.Contains(e.Error(), "3600") {
				t.Errorf("run refusal must name both ceilings: %s", e)
			}
		} else if v.Seconds() != tt.sec {
			t.Errorf("Seconds() = %d, want %d", v.Seconds(), tt.sec)
		}
	}
	build := []struct {
		sec     int
		ok      bool
		catches string
	}{
		{1, true, "an exclusive lower bound"},
		{61, true, "sharing the 60 s run ceiling with the build family"},
		{3600, true, "an exclusive upper bound"},
		{3601, false, "an off-by-one ceiling"},
		{0, false, "accepting 0"},
		{65536 + 60, false, "uint16 wraparound before the range check"},
	}
	for _, tt := range build {
		v, err := NewBuildHookTimeout(tt.sec)
		if tt.ok != (err == nil) {
			t.Errorf("NewBuildHookTimeout(%d) err=%v (catches: %s)", tt.sec, err, tt.catches)
			continue
		}
		if err != nil {
			e := requireRefusal(t, err, hookTimeoutFinding)
			if !strings.Contains(e.Error(), "1..3600") || !strings.Contains(e.Error(), "60s") {
				t.Errorf("build refusal must name both ceilings: %s", e)
			}
		} else if v.Seconds() != tt.sec {
			t.Errorf("Seconds() = %d, want %d", v.Seconds(), tt.sec)
		}
	}
	// Catches: giving both types the same underlying struct, which would make
	// RunHookTimeout(buildTimeout) compile and launder 300 s into a run hook.
	rt, bt := reflect.TypeOf(RunHookTimeout{}), reflect.TypeOf(BuildHookTimeout{})
	if rt.ConvertibleTo(bt) || bt.ConvertibleTo(rt) {
		t.Fatal("RunHookTimeout and BuildHookTimeout must not convert into each other")
	}
}
