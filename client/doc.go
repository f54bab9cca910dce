// Package client is the Go library for AWS Lambda MicroVMs: the typed closures
// over the platform's measured traps (Region, SizeClass, hook timeouts), the one
// error type every layer returns, and the session plane that talks to agentd
// through a VM's endpoint. The control plane is client/lambdamicrovms
// (configured by client/cplane) and the cost engine client/cost.
//
// Most programs start one level up: client/sandbox is one MicroVM as a
// sandbox (launch or attach, run, files and directories, suspend, resume,
// teardown, cost), and emulator/embedded runs the local emulator in-process
// in one call, so the same program works on this machine before AWS. The
// sandbox package's documentation has a runnable example and a table mapping
// E2B's SDK and the reference library onto these packages.
//
// It must never send a request the platform is known to answer badly: a value
// that a measured finding says will fail is refused locally, before any network
// call, with an *Error naming that finding. It must never print an agent or
// proxy token, never buffer a file, archive or output stream whole, and never
// construct a session by probing the VM.
package client
