// Package render is how a command's answer reaches its caller: the one JSON
// envelope of api/cli.yaml (success and failure), its human and dense
// forms, tables, byte counts and durations, and the progress, warning and
// spinner lines on stderr. IO holds one invocation's streams and the output
// mode the global flags chose; a command hands back a Result (or a Failure
// carrying a partial one) and render writes it. The data shapes every part
// of the command fills from the library's values (FileEntry, ExecData,
// CostReport, URLData) and the errors they all raise (InvalidArg,
// AsClientError) live here too, beside the envelope that carries them.
//
// It must never call out to a daemon, the control plane or the platform,
// parse a command line, or decide an exit code: the code is the error
// kind's row of the generated exit table, which the command's error
// carries. Under --json it writes
// nothing to stdout but the one envelope (a Result marked Written, as
// constants --emit-json is, wrote its own; after exec --stream's NDJSON
// lines Streamed makes the envelope one line), and it never imports the
// command (cmd/microvm) above it.
package render
