package main

import (
	"context"

	"github.com/alecthomas/kong"

	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
)

// app is one invocation: its I/O and output mode, and what the failure
// path needs to know to explain a failure and name its fix.
type app struct {
	render.IO
	parser *kong.Kong
	// command is the selected command's name (exec, cp...), for hints that
	// differ by command: a 404 is a path to cp and an exec id to ack.
	command string
	// attached is set once a command addresses a VM it did not launch: an
	// interrupt then leaves the VM and the exec as they were, which is the
	// timeout row's meaning, not the interrupted row's (teardown ran).
	attached bool
	// unreachable is set when fail reclassed a refused connection.
	unreachable bool
	// vmStatus is the attached MicroVM's state when a failure at its
	// endpoint was explained by it (hints.go); status reads it.
	vmStatus *sandbox.Status
	status   func(context.Context) (sandbox.Status, error)
	// awsWithoutCredentials is set when a command bound for AWS itself (no
	// control endpoint, no --local) found no credentials at all.
	awsWithoutCredentials bool
}

// version is the CLI's version; the build may override it with -ldflags -X.
var version = "0.1.0"
