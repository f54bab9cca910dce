package workflow

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testbin"
	"github.com/microvms/microvms/localvm"
)

func TestMain(m *testing.M) {
	localvm.Init() // this test binary is also every local guest's init
	agentd, err := testbin.Build("cmd/agentd", testbin.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("MICROVM_AGENTD", agentd)
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// local is a platform over an emulator in this process, as --local opens
// one, with an image registered under name.
func local(t *testing.T, name string) (*platform.Platform, string) {
	t.Helper()
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	cpc, err := emu.Control(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := platform.Open(ctx, platform.Options{Region: emu.Region(), Endpoint: emu.URL, Control: cpc,
		Emulator: &platform.Emulator{Credentials: embedded.Credentials(), Wait: embedded.WaitOptions}})
	if err != nil {
		t.Fatal(err)
	}
	return pf, emu.Server.AddImage(name)
}

func record(t *testing.T, pf *platform.Platform) (*ledger.Ledger, *ledger.Record, string) {
	t.Helper()
	dir := t.TempDir()
	led, err := ledger.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := led.Begin(pf.Region().String())
	if err != nil {
		t.Fatal(err)
	}
	return led, rec, dir
}

// TestRunNamesLaunchesExecsTearsDownAndPrices walks one run on the emulator
// from an image given by name. It catches a run that skips a step: the name
// not resolved to its ARN, the command's exit not returned as
// ERR_EXEC_FAILED with its result kept, the MicroVM left up, the ledger
// record left open, or no cost (or one not labelled as local).
func TestRunNamesLaunchesExecsTearsDownAndPrices(t *testing.T) {
	pf, arn := local(t, "wf-run")
	_, rec, dir := record(t, pf)
	var steps []Step
	size, _ := client.SizeClassFromBaseline(taxonomy.DefaultBaselineMiB)
	res, err := Run(context.Background(), Options{
		Platform: pf, Image: Image{Identifier: "wf-run"},
		Launch:  Launch{MaxIdle: DefaultMaxIdle, SuspendedFor: DefaultSuspendedFor, MaxDuration: DefaultMaxDuration, Port: taxonomy.DefaultAgentPort},
		Command: "echo hi; exit 3", Timeout: DefaultTimeout, Size: size, Ledger: rec,
		Events: func(e Event) { steps = append(steps, e.Step) },
	})
	if client.KindOf(err) != taxonomy.KindExecFailed {
		t.Fatalf("err = %v, want the command's exit as ERR_EXEC_FAILED", err)
	}
	if res.ImageARN != arn || res.ImageName != "wf-run" {
		t.Errorf("image = %q %q, want %q wf-run", res.ImageARN, res.ImageName, arn)
	}
	if res.Exec == nil || res.Exec.Stdout != "hi\n" || res.Exec.ExitCode == nil || *res.Exec.ExitCode != 3 {
		t.Fatalf("exec = %+v, want stdout hi and exit 3", res.Exec)
	}
	if res.Sandbox == nil || !res.Sandbox.WasTerminated() || res.Kept || len(res.Leaked) != 0 || !res.Made {
		t.Errorf("teardown: sandbox %v kept %v leaked %v made %v", res.Sandbox, res.Kept, res.Leaked, res.Made)
	}
	if res.Cost == nil || !strings.Contains(res.Cost.Label, "local") || res.RanFor <= 0 {
		t.Errorf("cost = %+v, ran %v: want a report labelled local", res.Cost, res.RanFor)
	}
	want := []Step{ImageFound, ImageResolved, Launching, Launched, Running, Exec, TearingDown, Clean}
	var got []Step
	for _, s := range steps {
		if s == LaunchPolled {
			continue // as many as the launch's polls
		}
		if len(got) == 0 || got[len(got)-1] != s {
			got = append(got, s)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	runs, _, err := ledger.List(dir)
	if err != nil || len(runs) != 1 || !runs[0].Closed || runs[0].ImageARN != arn || len(runs[0].Commands) != 1 {
		t.Fatalf("ledger = %+v (%v), want one closed run naming the image and its command", runs, err)
	}
}

// TestFleetRunsEachAndLeavesNothing runs a fleet of two. It catches a fleet
// that loses a run's outcome, leaves a MicroVM up, or reports no cost.
func TestFleetRunsEachAndLeavesNothing(t *testing.T) {
	pf, arn := local(t, "wf-fleet")
	led, rec, _ := record(t, pf)
	parallel, err := CheckFleet(2, 0)
	if err != nil || parallel != 2 {
		t.Fatalf("CheckFleet(2, 0) = %d, %v; want 2", parallel, err)
	}
	size, _ := client.SizeClassFromBaseline(taxonomy.DefaultBaselineMiB)
	res, err := Fleet(context.Background(), FleetOptions{
		Platform: pf, Image: Image{Identifier: arn},
		Launch:  Launch{MaxIdle: DefaultMaxIdle, SuspendedFor: DefaultSuspendedFor, MaxDuration: DefaultMaxDuration, Port: taxonomy.DefaultAgentPort},
		Command: "echo ok", Timeout: DefaultTimeout, Count: 2, Parallel: parallel, Size: size, Ledger: led, Record: rec,
	})
	if err != nil || res.Worst() != nil {
		t.Fatalf("fleet: %v, worst %v", err, res.Worst())
	}
	if len(res.Report.Outcomes) != 2 || len(res.Leaked) != 0 || res.Cost == nil || !res.Launched {
		t.Fatalf("fleet = %+v", res)
	}
	for _, o := range res.Report.Outcomes {
		if o.Result.Stdout != "ok\n" || !o.Teardown.MicrovmTerminated {
			t.Errorf("run %d: stdout %q, terminated %v", o.Index, o.Result.Stdout, o.Teardown.MicrovmTerminated)
		}
	}
}

// TestFleetBoundsAndWorst catches a bound moved off api/errors.yaml's and a
// fleet whose worst failure is a mild one while a worse one happened.
func TestFleetBoundsAndWorst(t *testing.T) {
	for _, c := range [][2]int{{0, 0}, {taxonomy.MaxFleetCount + 1, 0}, {2, taxonomy.MaxFleetParallel + 1}, {2, -1}} {
		if _, err := CheckFleet(c[0], c[1]); client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Errorf("CheckFleet(%d, %d) = %v, want ERR_INVALID_ARG", c[0], c[1], err)
		}
	}
	if p, err := CheckFleet(taxonomy.DefaultFleetParallel+3, 0); err != nil || p != taxonomy.DefaultFleetParallel {
		t.Errorf("CheckFleet default parallel = %d, %v", p, err)
	}
	if severity(taxonomy.KindExecFailed) >= severity(taxonomy.KindTimeout) || severity(taxonomy.KindTimeout) >= severity(taxonomy.KindPrecondition) {
		t.Error("a command's exit must rank below a timeout, and a timeout below the fleet's own failure")
	}
}

// TestImageNameIsParsedOnce catches a caller-side cut of the ARN that
// disagrees with cplane.ParseImageRef.
func TestImageNameIsParsedOnce(t *testing.T) {
	for in, want := range map[string]string{
		"web-1": "web-1",
		"arn:aws:lambda:us-east-1:123456789012:microvm-image:web-1": "web-1",
		"arn:aws:lambda:us-east-1:123456789012:microvm-image/web-1": "",
	} {
		if got := cplane.ImageName(in); got != want {
			t.Errorf("ImageName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNoImageIsRefusedBeforeAnything catches a workflow that calls a nil
// Build (a panic) when given neither an image nor a build.
func TestNoImageIsRefusedBeforeAnything(t *testing.T) {
	if _, err := Run(context.Background(), Options{}); client.KindOf(err) != taxonomy.KindInvalidArg {
		t.Errorf("Run without an image = %v, want ERR_INVALID_ARG", err)
	}
	if _, err := Fleet(context.Background(), FleetOptions{Count: 1}); client.KindOf(err) != taxonomy.KindInvalidArg {
		t.Errorf("Fleet without an image = %v, want ERR_INVALID_ARG", err)
	}
}
