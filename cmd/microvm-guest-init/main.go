// Command microvm-guest-init is a local guest's first two processes: its
// init (PID 1, which builds the guest's root) and the second stage that
// confines and executes the daemon (localvm/guestinit). The local emulator
// runs it from beside its configured agentd, where make build, the wheel
// and the npm platform packages put it; without it the emulator re-executes
// its own binary instead, which starts tens of milliseconds slower.
//
// It is a binary of its own, not a mode of agentd, so the daemon every
// MicroVM image runs carries none of it (its resident size is a measured
// target), and so it starts in about a millisecond: it links the init's
// package and the standard library, nothing else. Run by hand it only
// explains itself.
package main

import (
	"fmt"
	"os"

	"github.com/microvms/microvms/localvm/guestinit"
)

func main() {
	guestinit.Main() // returns only when argv[0] is not the init's or its stage's
	fmt.Fprintf(os.Stderr, "%s: a local guest's init; only the microvm emulator runs it (%s)\n", guestinit.BinaryName, guestinit.ABI)
	os.Exit(2)
}
