//go:build !linux

package agentd

// agentd runs only inside a Lambda MicroVM, which is Linux: its process
// groups, pidfds, openat2 confinement, O_TMPFILE writes and identity repair
// are Linux system calls, kept in the _linux.go files. Building it elsewhere
// stops here with this name in the error instead of a list of missing
// symbols.
var _ = agentdBuildsOnlyForLinux
