// Package argv prepares the command line's words for the parser and checks
// them after it: HoistFlags lets exec take its own flags wherever they
// stand, ProtectBytes and RestoreBytes carry bytes that are not UTF-8
// through the parser unaltered, and RequireText refuses, by name, a word
// that has to travel as JSON text and cannot.
//
// It must never call the library, write to stdout or stderr, or define a
// flag: the command tree is the command's (cmd/microvm), and a refusal here
// is an InvalidArg error that the command renders like any other.
package argv
