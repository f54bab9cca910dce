package localvm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/microvms/microvms/localvm/guestinit"
)

// guestInitPath is where an install keeps the init of the guests of the
// agentd at own: beside the file own names, through any symlink to it (the
// init ships with the binary, not with a link someone made to it).
func guestInitPath(own string) string {
	if real, err := filepath.EvalSymlinks(own); err == nil {
		own = real
	}
	return filepath.Join(filepath.Dir(own), guestinit.BinaryName)
}

// GuestInitBeside reports the microvm-guest-init guests of the agentd at
// path start from, or why they start from the emulator's own binary
// instead (none installed, or one of another build): that works, a few tens
// of milliseconds slower per guest (issue 52). For microvm doctor; a launch
// decides on the sealed copy it runs, never on this answer.
func GuestInitBeside(agentd string) (string, error) {
	p := guestInitPath(agentd)
	b, err := os.ReadFile(p)
	if err != nil {
		return p, err
	}
	if !bytes.Contains(b, []byte(guestinit.ABI)) {
		return p, fmt.Errorf("%s is of another build than this microvm", p)
	}
	return p, nil
}
