// Package agentd is the daemon baked into a Lambda MicroVM image as its CMD. It
// serves the platform's lifecycle hooks and the bearer-authenticated control
// API of protocol v1 (detached idempotent exec with SSE streaming and stdin,
// file and tar transfer, health and the protocol document) and our additions
// to it (among them the one-exchange run route and binary output frames),
// implementing the server interface generated from api/openapi.yaml.
//
// It is the only way into the VM: there is no SSH, no console and no
// supervisor. So it must never drop a connection without an answer (a panic is
// a 500, a TLS probe a 400), never read a body byte before deciding auth, never
// hand the agent token or its own environment to a child, never release exec
// output before the caller acks it (an ack, or the run route's exit event
// written to a connection still open), and never buffer an unbounded amount of
// anything in memory: an OOM-killed daemon leaves an unreachable VM. And it
// must never rewrite the identity of a machine that has not said it is a
// MicroVM guest (AGENTD_REPAIR_IDENTITY): a developer's machine looks like one.
package agentd
