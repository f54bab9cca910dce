package sandbox_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator/embedded"
)

// A warm pool: sandboxes launched and suspended ahead of time, so handing
// one out is a resume, not a launch. A released sandbox is terminated, never
// handed to the next tenant; the pool launches a fresh one in its place.
// The cost report prices the idle members as the platform bills them:
// snapshot storage, each snapshot at least its one-week retention floor.
func ExamplePool() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolOptions{Size: 2, Launch: emu.Launch})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close(ctx)
	if err := pool.WaitReady(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(pool.Ready(), "suspended and waiting")

	sb, err := pool.Acquire(ctx) // resumed: RUNNING, ready to exec
	if err != nil {
		log.Fatal(err)
	}
	res, err := sb.Run(ctx, []string{"echo", "hello from", string(sb.Lifecycle())}, client.RunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	fmt.Println("released, terminated:", pool.Release(ctx, sb).MicrovmTerminated)

	if err := pool.WaitReady(ctx); err != nil { // the replacement is suspended too
		log.Fatal(err)
	}
	rep := pool.Close(ctx) // one report for everything the pool launched
	fmt.Println(len(rep.Members), "torn down; served", rep.Served, "; clean:", rep.Clean())

	bill, err := pool.Cost(ctx, cost.Pinned(emu.Region()))
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range bill.Lines {
		if l.Phase == cost.PhaseSuspended {
			fmt.Println(l.Phase, l.Billing, l.Quantity, l.Unit, "("+l.Note+")")
		} else {
			fmt.Println(l.Phase, l.Billing, "("+l.Note+")")
		}
	}
	// Output:
	// 2 suspended and waiting
	// hello from RUNNING
	// released, terminated: true
	// 3 torn down; served 1 ; clean: true
	// launch snapshot-read (3 sandboxes; each 1 x 2 GB)
	// running vcpu (3 sandboxes; each 1 vCPU baseline)
	// running memory (3 sandboxes; each 2 GB baseline)
	// suspended snapshot-storage 1008 GB-hours (3 sandboxes)
	// suspend snapshot-write (3 sandboxes; each 1 x 2 GB)
	// resume snapshot-read (1 x 2 GB)
}

// A fleet: the same command in several sandboxes, at most two alive at
// once, every result and error collected per sandbox and every sandbox torn
// down, whatever happened to the others. A Task may also be any function
// of the sandbox.
func ExampleRunMany() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	fleet := sandbox.FleetOptions{Count: 4, Parallel: 2, Launch: emu.Launch}
	rep, err := sandbox.RunMany(ctx, fleet, sandbox.Command([]string{"hostname"}, client.RunOptions{}))
	if err != nil {
		log.Fatal(err)
	}
	hosts := map[string]bool{}
	for _, o := range rep.Outcomes {
		hosts[o.Result.Stdout] = true
		fmt.Println(o.Index, o.Result.ExitStatus, o.Err, o.Teardown.MicrovmTerminated)
	}
	fmt.Println(len(hosts), "distinct hostnames;", len(emu.Server.LiveMicrovms()), "left running")

	// A function: its own files in each sandbox, one of them failing.
	rep, err = sandbox.RunMany(ctx, sandbox.FleetOptions{Count: 3, Launch: emu.Launch},
		func(ctx context.Context, i int, sb *sandbox.Sandbox) (client.Result, error) {
			if err := sb.WriteFile(ctx, "/tmp/task", []byte(fmt.Sprint("exit ", i%2)), 0o644); err != nil {
				return client.Result{}, err
			}
			res, err := sb.Run(ctx, []string{"sh", "/tmp/task"}, client.RunOptions{})
			if err != nil {
				return res, err
			}
			return res, res.Err()
		})
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range rep.Failed() {
		fmt.Println("sandbox", o.Index, "failed:", client.KindOf(o.Err).Code())
	}
	bill, err := rep.Cost(ctx, cost.Pinned(emu.Region()), "fleet")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.SplitN(bill.String(), "\n", 2)[0])
	// Output:
	// 0 0 <nil> true
	// 1 0 <nil> true
	// 2 0 <nil> true
	// 3 0 <nil> true
	// 4 distinct hostnames; 0 left running
	// sandbox 1 failed: ERR_EXEC_FAILED
	// fleet: 2048 MiB / 1 vCPU baseline (billed while running), peak 8192 MiB / 4 vCPU (what the guest reports) in us-east-1
}
