// Package mcpserver is `microvm mcp` (api/mcp.yaml): sandboxes as Model
// Context Protocol tools, served with the official Go SDK over stdio or
// streamable HTTP. The tools, their JSON Schemas and the limits come from
// gen/mcpapi; the SDK validates every call's arguments and every structured
// result against those schemas.
//
// Every sandbox belongs to the client session that created it: another
// session cannot name it, and it is terminated when that session ends (stdin
// closes, an HTTP session is deleted or idles out) or the server is
// interrupted, with a teardown report on stderr, the server's log.
//
// The command (cmd/microvm) parses the flags, opens the control plane and
// hands it here as a Plane; this package must never open a plane of its own,
// parse a flag, or write an envelope: stdout is the MCP transport's alone.
// It must never let one session reach another's sandbox, nor end with a
// sandbox it launched still alive.
package mcpserver
