// Package sse decodes an exec stream's server-sent events, as agentd writes
// them on the stream and run routes: it splits the body into frames and
// decodes the output, gap and exit payloads into Events, reading in place and
// reusing its buffers so a steady stream costs no allocation per event. The
// gap and exit payloads of binary frames are decoded here too (DecodeEnd), to
// the same rules. The client's Stream, which reconnects and reports, is its
// only user.
//
// It must never report a body cut inside a frame as a clean end, never hand
// out an output chunk that is not exactly the payload's base64, and never
// build the client's errors: a payload that does not decode is a
// *MalformedError, and the caller says what it means.
package sse
