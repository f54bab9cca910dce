// Package engine is `microvm engine` (api/engine.yaml): one sandbox behind
// a line protocol on stdin/stdout, so the Python and TypeScript packages
// drive the Go library (its state machine, traps, teardown and cost engine)
// instead of re-implementing any of it. Every answer is a CLI envelope, so
// errors carry the generated code, exit code and wire kind exactly as
// `microvm --json` does.
//
// The steps that belong to the command (its fleet, the region and image
// rules its flags spell) come in as Hooks. This package must never import
// the command, parse a flag, or reimplement what the library or those hooks
// do; stdout carries response frames only, and it must never end with a
// sandbox it launched still up.
package engine
