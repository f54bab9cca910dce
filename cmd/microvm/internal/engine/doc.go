// Package engine is `microvm engine` (api/engine.yaml): sandboxes behind
// a line protocol on stdin/stdout (the default one, and any number under
// the caller's handles, each with its own state and lock, so one process
// serves every sandbox of a client), so the Python and TypeScript packages
// drive the Go library (its state machine, traps, teardown and cost engine)
// instead of re-implementing any of it. Every answer is a CLI envelope, so
// errors carry the generated code, exit code and wire kind exactly as
// `microvm --json` does.
//
// It calls the library itself: run_many is client/workflow's Fleet, a build
// client/workflow's Build, an image name client/workflow's ResolveImage, and
// the region and the in-process emulator's platform come from
// cmd/microvm/internal/planes, as the commands' do. This package must never
// import the command, parse a flag (nor turn a request back into argv), or
// reimplement what the library does; stdout carries response frames only,
// and it must never end with a sandbox it launched still up, under any handle.
package engine
