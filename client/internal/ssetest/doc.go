// Package ssetest writes agentd's exec-stream SSE frames, byte for byte as
// agentd writes them (an id line, the resume offset just past the event,
// before the data line), for tests of the client's stream and its decoder.
//
// It must never be imported by non-test code: it is a fixture, not a writer
// the library or the daemon sends with.
package ssetest
