package ledger

import (
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// TestCommandsAndRunningSurviveTheFile: a run's commands with their usage
// and its running stretches are read back exactly as written (to the
// nanosecond: the cost split checks the stretches add up to the billed
// running time). Catches: a field left out of the JSON, or times written
// at a coarser precision.
func TestCommandsAndRunningSurviveTheFile(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 123456789, time.UTC)
	code := int32(0)
	peak := uint64(3)
	u := &protocol.ExecUsage{Source: protocol.Cgroup, WallSecs: 1.5, UserCPUSecs: 0.25, SystemCPUSecs: 0.125, PeakMemoryBytes: 1 << 20,
		StdoutBytes: 5, StderrBytes: 1, PeakProcesses: &peak, Missing: []string{}}
	err = rec.Update(func(r *Run) {
		r.BaselineMiB = 2048
		r.Running = []Span{{Start: t0, End: t0.Add(90*time.Second + 7)}}
		r.Commands = []Command{{ExecID: "x-1", Command: "make", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), ExitCode: &code, OOMKilled: true, Usage: u}}
	})
	if err != nil {
		t.Fatal(err)
	}
	runs, _, err := List(dir)
	if err != nil || len(runs) != 1 {
		t.Fatalf("%v %v", runs, err)
	}
	r := runs[0]
	if r.BaselineMiB != 2048 || len(r.Running) != 1 || r.Running[0].End.Sub(r.Running[0].Start) != 90*time.Second+7 {
		t.Fatalf("running %+v", r.Running)
	}
	c := r.Commands[0]
	if len(r.Commands) != 1 || c.ExecID != "x-1" || !c.OOMKilled || c.ExitCode == nil || *c.ExitCode != 0 || c.Usage == nil ||
		c.Usage.UserCPUSecs != 0.25 || c.Usage.PeakProcesses == nil || *c.Usage.PeakProcesses != 3 || !c.Start.Equal(t0.Add(time.Second)) {
		t.Fatalf("command %+v usage %+v", c, c.Usage)
	}
}
