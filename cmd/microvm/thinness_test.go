package main

import (
	"fmt"
	"go/build"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/microvms/microvms/client/workflow"
)

// allowedImports pins every package outside the standard library that
// package main imports directly, as tailscale's depaware.txt pins a binary's
// dependencies: the commands parse, call the library, and render, so what
// they reach is the library (client/...), their own parts
// (cmd/microvm/internal/...), the generated contracts, the emulator they
// start for --local, and the parser and terminal packages.
var allowedImports = []string{
	"github.com/alecthomas/kong",
	"github.com/microvms/microvms/client",
	"github.com/microvms/microvms/client/build",
	// checkpoint: run --volume parses NAME:/path with its ParseMount, and
	// the volume command names its Volumes and Manifest; every step of
	// theirs is the library's (client/platform's SaveVolumes, workflow).
	"github.com/microvms/microvms/client/checkpoint",
	"github.com/microvms/microvms/client/cost",
	"github.com/microvms/microvms/client/cplane",
	"github.com/microvms/microvms/client/kept",
	"github.com/microvms/microvms/client/ledger",
	"github.com/microvms/microvms/client/platform",
	"github.com/microvms/microvms/client/sandbox",
	"github.com/microvms/microvms/client/setup",
	"github.com/microvms/microvms/client/workflow",
	"github.com/microvms/microvms/cmd/microvm/internal/argv",
	"github.com/microvms/microvms/cmd/microvm/internal/engine",
	"github.com/microvms/microvms/cmd/microvm/internal/mcpserver",
	"github.com/microvms/microvms/cmd/microvm/internal/planes",
	"github.com/microvms/microvms/cmd/microvm/internal/render",
	"github.com/microvms/microvms/emulator",
	"github.com/microvms/microvms/emulator/embedded",
	"github.com/microvms/microvms/gen/cliapi",
	"github.com/microvms/microvms/gen/protocol",
	"github.com/microvms/microvms/gen/setupapi",
	"github.com/microvms/microvms/gen/taxonomy",
	// main's first call is localvm.Init: the binary is also every local
	// guest's init, and the re-exec is explicit, as runc's is.
	"github.com/microvms/microvms/localvm",
	"github.com/shopspring/decimal",
	"golang.org/x/term",
}

// The line caps of a non-test file: a command is flags, a call and its
// rendering, so a file past its cap is holding a workflow. Today's largest
// are run.go (~330) in package main and engine/engine.go (~515) among the
// command's parts.
const (
	mainFileCap     = 400
	internalFileCap = 560
)

// TestCommandsStayThin pins what package main imports and how big its files
// and its internal packages' files may grow. It catches the wrong edit this
// package was made thin against (issue 46): a workflow written back into a
// command, as RunCmd.run once held build → launch → exec → teardown →
// ledger → cost inline (the file outgrows its cap), or a command reaching
// past the library for the control plane's SDK, the AWS SDK or a new
// dependency (an import missing from allowedImports).
func TestCommandsStayThin(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			got = append(got, imp)
		}
	}
	for _, imp := range got {
		if !slices.Contains(allowedImports, imp) {
			t.Errorf("package main imports %s, which allowedImports does not list: a command parses, calls the library and renders, so put the step that needs it in the library (client/workflow, client/sandbox, client/platform) and call that; if the command truly needs it, add it to allowedImports in this file and say why in the commit", imp)
		}
	}
	for _, imp := range allowedImports {
		if !slices.Contains(got, imp) {
			t.Errorf("allowedImports lists %s, which package main no longer imports: remove it from the list, so the pin stays exact", imp)
		}
	}

	check := func(path string, limit int) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > limit {
			t.Errorf("%s has %d lines, over its cap of %d: a command file that grows past it is holding a workflow; move the steps into the library (client/workflow for run and fleet) and keep parse → call → render here, or split the file by command", path, n, limit)
		}
	}
	for _, f := range pkg.GoFiles {
		check(f, mainFileCap)
	}
	err = filepath.WalkDir("internal", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			check(path, internalFileCap)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRunDefaultsAreTheLibrarys holds run's flag defaults equal to
// client/workflow's, which the engine's run_many launches with. It catches
// a default changed in one place only (a tag edited, the constant not), which
// would make a Python or TypeScript fleet launch differently from
// `run --count`.
func TestRunDefaultsAreTheLibrarys(t *testing.T) {
	want := map[string]string{
		"Timeout":        fmt.Sprint(workflow.DefaultTimeout.Seconds()),
		"MaxIdleSec":     fmt.Sprint(int(workflow.DefaultMaxIdle.Seconds())),
		"SuspendedSec":   fmt.Sprint(int(workflow.DefaultSuspendedFor.Seconds())),
		"MaxDurationSec": fmt.Sprint(int(workflow.DefaultMaxDuration.Seconds())),
	}
	rt := reflect.TypeOf(RunCmd{})
	for name, v := range want {
		f, ok := rt.FieldByName(name)
		if !ok {
			t.Fatalf("RunCmd has no field %s", name)
		}
		if got := f.Tag.Get("default"); got != v {
			t.Errorf("RunCmd.%s defaults to %q, client/workflow to %s: change both, or the engine's run_many launches differently from run --count", name, got, v)
		}
	}
}
