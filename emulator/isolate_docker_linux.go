//go:build linux

package emulator

import (
	"slices"

	"github.com/moby/profiles/seccomp"
)

// dockerAllowed is the set of syscalls Docker's default profile lets a
// container with Docker's default capabilities make on goarch (the
// profile names architectures as Go does).
// Entries conditioned on arguments count as allowed: this filter does not
// inspect arguments, and the user namespace bounds what the flags can do.
func dockerAllowed(goarch string) map[string]bool {
	out := map[string]bool{}
	for _, sc := range seccomp.DefaultProfile().Syscalls {
		if sc.Action != "SCMP_ACT_ALLOW" {
			continue
		}
		if inc := sc.Includes; inc != nil {
			if len(inc.Arches) > 0 && !slices.Contains(inc.Arches, goarch) {
				continue
			}
			if len(inc.Caps) > 0 && !slices.ContainsFunc(inc.Caps, func(c string) bool { return slices.Contains(dockerDefaultCaps, c) }) {
				continue
			}
		}
		for _, n := range sc.Names {
			out[n] = true
		}
	}
	return out
}
