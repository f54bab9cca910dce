// Package guestinit is what runs inside a local guest before its program:
// the guest's PID 1 (the init: it builds the guest's root, serves the
// emulator's dials, reaps) and the second stage that enters that root,
// installs the syscall filter the launcher assembled, drops capabilities
// and executes the daemon or a build step's command.
//
// It is linked into two binaries: the emulator's, which re-executes itself
// as the init when it must, and cmd/microvm-guest-init (BinaryName), which
// the launcher (localvm) prefers when one of this build's ABI sits beside
// its own configured agentd (never beside an agentd an image's artifact
// carries: the init sees the host's tree before it pivots). A guest's first
// two processes then start from a binary a tenth the size, with a few
// package initialisers instead of hundreds, which was most of a guest's
// start (issue 52). Never agentd's: the daemon of every image would carry
// it, and its resident size is a measured target. So this package imports
// nothing of the module and nothing heavy (layering holds it), and must
// never grow host-side code: the host's half of every exchange is localvm's.
package guestinit

// InitArg0 is the init's argv[0]: what a guest sees as its PID 1's command
// line, and what Main dispatches on.
const InitArg0 = "microvms-emulator-guest-init"

// BinaryName is cmd/microvm-guest-init's file name: the launcher looks for
// it beside its configured agentd, where every install puts it.
const BinaryName = "microvm-guest-init"

// ProbeArg0 is the isolation probe's child: the namespaces and mounts a
// guest's init makes, tried once per emulator before its first launch.
const ProbeArg0 = "microvms-emulator-isolation-probe"

// execArg0 is the init's second stage (guestExec).
const execArg0 = "microvms-emulator-guest-exec"

// ABIEnv carries the launcher's ABI into the init's environment; an init
// whose own ABI differs refuses to run (Main), so a daemon binary built
// from other sources than the emulator never sets up its guest.
const ABIEnv = "MICROVMS_GUEST_ABI"

// FilterInstruction is one instruction of the guest's seccomp program
// (struct sock_filter), assembled by the launcher.
type FilterInstruction struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}
