// Package emulator is an in-memory AWS Lambda MicroVMs control plane speaking
// the service's REST-JSON wire format, built on the server interface generated
// from api/lambda-microvms.yaml. It keeps real state (images with versions and
// per-chipset builds, MicroVMs with their lifecycle, tags, clientTokens ever
// seen) and replays the platform's measured traps on demand: the clientToken
// replay wedge, a launch that dies before RUNNING, the null-message 403 of an
// unsupported region, the slash-form image ARN's misleading 403, filtering
// after paging, the 400 for an unencoded '=' in a cursor, throttling and a
// gateway's 5xx HTML page.
//
// State advances when it is observed (each read of a resource is one step),
// never by the wall clock, so a test driving it is deterministic.
//
// It must never listen on anything but the address its caller gives it (tests
// use loopback), never call AWS, and never invent wire fields: every body it
// reads or writes is a type from gen/controlplane.
package emulator
