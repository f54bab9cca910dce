package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator/embedded"
)

// A sandbox end to end on the local emulator: start it, launch, run,
// tear down. This is the whole program a new user needs; the emulator finds
// agentd as `microvm run --local` does (here through $MICROVM_AGENTD), needs
// no AWS credentials, and polls fast.
func Example() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
	res, err := sb.Run(ctx, []string{"echo", "hello from", string(sb.Lifecycle())}, client.RunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	fmt.Println("exit status", res.ExitStatus)
	// Output:
	// hello from RUNNING
	// exit status 0
}

// Run a shell script, stream its output as it is written, and read its
// exit status as a plain int. A shell command is one string: several argv
// elements with Shell set are refused instead of silently dropped.
func ExampleSandbox_Run() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Terminate(ctx, sandbox.TeardownOptions{})

	res, err := sb.Run(ctx, []string{"echo one; echo two; exit 3"}, client.RunOptions{
		StartOptions: client.StartOptions{Shell: true},
		Stdout:       os.Stdout, // live, as the bytes arrive
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit status", res.ExitStatus, client.KindOf(res.Err()).Code())

	_, err = sb.Run(ctx, []string{"echo", "a", "&&", "echo", "b"}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	fmt.Println(client.KindOf(err).Code())
	// Output:
	// one
	// two
	// exit status 3 ERR_EXEC_FAILED
	// ERR_INVALID_ARG
}

// Files as bytes, and whole directories both ways (tar underneath,
// streamed). A missing file is fs.ErrNotExist and its error names the path.
func ExampleSandbox_WriteFile() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
	work, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(work)

	if err := sb.WriteFile(ctx, "/tmp/example/note.txt", []byte("hi\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	b, err := sb.ReadFile(ctx, "/tmp/example/note.txt")
	fmt.Printf("%q %v\n", b, err)

	_, err = sb.ReadFile(ctx, "/tmp/example/missing.txt")
	fmt.Println(errors.Is(err, fs.ErrNotExist), strings.Contains(err.Error(), "/tmp/example/missing.txt"))

	src := filepath.Join(work, "src")
	os.MkdirAll(filepath.Join(src, "pkg"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "main.go"), []byte("package main\n"), 0o644)
	if err := sb.UploadDir(ctx, src, "/tmp/example/project"); err != nil {
		log.Fatal(err)
	}
	if err := sb.DownloadDir(ctx, "/tmp/example", filepath.Join(work, "back")); err != nil {
		log.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(work, "back", "project", "pkg", "main.go"))
	fmt.Printf("%q\n", got)
	// Output:
	// "hi\n" <nil>
	// true true
	// "package main\n"
}

// Reattach from another process: all it needs is the MicroVM id and the agent
// token the launching process read from Sandbox.AgentToken (`microvm run
// --keep` prints both). Files and execs are where the first process left
// them.
func ExampleAttach() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	first, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := first.WriteFile(ctx, "/tmp/left-behind", []byte("still here"), 0); err != nil {
		log.Fatal(err)
	}
	id, token := first.ID(), first.AgentToken() // hand these to the other process

	// The other process: its own control-plane client, no shared state.
	cpc, err := cplane.New(ctx, cplane.Options{Region: emu.Region(), Endpoint: emu.URL, Credentials: embedded.Credentials()})
	if err != nil {
		log.Fatal(err)
	}
	again, err := sandbox.Attach(ctx, cpc, id, token, sandbox.Options{Wait: embedded.WaitOptions(0)})
	if err != nil {
		log.Fatal(err)
	}
	b, err := again.ReadFile(ctx, "/tmp/left-behind")
	fmt.Println(string(b), err, again.Lifecycle())
	rep := again.Terminate(ctx, sandbox.TeardownOptions{DeleteImage: true})
	fmt.Println(rep.MicrovmTerminated, rep.ImageDeleted)
	// Output:
	// still here <nil> RUNNING
	// true not_owned
}

// The cost of a run, from what the platform reports: the time RUNNING comes
// from GetMicrovm's startedAt and terminatedAt, the size class from the
// image version. The caller times nothing and guesses nothing.
func ExampleSandbox_Cost() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Run(ctx, []string{"true"}, client.RunOptions{}); err != nil {
		log.Fatal(err)
	}
	sb.Terminate(ctx, sandbox.TeardownOptions{})
	rep, err := sb.Cost(ctx, cost.Pinned(emu.Region()))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("size:", rep.Size.BaselineMiB(), "MiB baseline")
	for _, l := range rep.Lines {
		fmt.Println(l.Phase, l.Billing, l.Duration.Provenance())
	}
	fmt.Println("fully priced:", !rep.Total().IsLowerBound())
	// Output:
	// size: 2048 MiB baseline
	// launch snapshot-read unset
	// running vcpu measured
	// running memory measured
	// fully priced: true
}

// Control-plane basics: the emulator's client is an ordinary
// lambdamicrovms.Client, so listing, reading and terminating MicroVMs is the
// same code against AWS.
func Example_controlPlane() {
	ctx := context.Background()
	emu, err := embedded.Start(ctx, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	sb, err := emu.Launch(ctx, sandbox.Options{})
	if err != nil {
		log.Fatal(err)
	}
	cpc, err := emu.Client(ctx)
	if err != nil {
		log.Fatal(err)
	}
	got, err := cpc.GetMicrovm(ctx, &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: aws.String(sb.ID())})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.State)
	var items []types.MicrovmItem
	pages := lambdamicrovms.NewListMicrovmsPaginator(cpc, &lambdamicrovms.ListMicrovmsInput{MaxResults: aws.Int32(10)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			log.Fatal(err)
		}
		items = append(items, page.Items...)
	}
	fmt.Println(len(items), "microvm")
	fmt.Println(sb.Terminate(ctx, sandbox.TeardownOptions{}).Clean())
	// Output:
	// RUNNING
	// 1 microvm
	// true
}
