// Package preflight holds the tests of scripts/preflight.sh, the first step
// of make check, which names every tool the machine lacks and the package
// that brings it. It has no code of its own and must never grow any: the
// check is a shell script so it can answer before Go builds anything.
package preflight
