// Package workflow is the platform's two workflows a caller starts with one call:
// Run (build or name an image, launch one MicroVM, run one command, tear
// down, close the ledger record, delete this run's local artifact, price
// what ran) and Fleet (the same over sandbox.RunMany, one image for Count
// MicroVMs), and issue 47's checkpoint workflows (checkpoint.go, from.go:
// Checkpoint, Checkpoints, RemoveCheckpoint, FleetFrom for `run --from`,
// Fork, Restore) over client/checkpoint. Each takes typed options and returns a typed result: what was
// made, what leaked, and the cost. `microvm run`, `microvm engine`'s
// run_many and `microvm mcp` call them; none re-implements a step.
//
// It sits beside client/sandbox, not inside it, because it drives
// client/platform (images, log groups, the artifact store), which itself
// depends on client/sandbox.
//
// What it must never do: print or log (progress goes to Options.Events,
// warnings to Options.Warn, the command's bytes to Options.Stdout/Stderr);
// parse a flag or name one; return without tearing down what it launched
// unless Options.Keep asked; or leave a leak unnamed in the result.
package workflow
