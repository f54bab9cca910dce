// Package client is the Go library for AWS Lambda MicroVMs: the typed closures
// over the platform's measured traps (Region, SizeClass, hook timeouts), the one
// error type every layer returns, and the session plane that talks to agentd
// through a VM's endpoint. The control plane lives in client/control and the
// cost engine in client/cost.
//
// It must never send a request the platform is known to answer badly: a value
// that a measured finding says will fail is refused locally, before any network
// call, with an *Error naming that finding. It must never print an agent or
// proxy token, never buffer a file, archive or output stream whole, and never
// construct a session by probing the VM.
package client
