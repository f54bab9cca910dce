//go:build linux

package localvm

import (
	"slices"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
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

// dockerSocketFamilies returns whether Docker's default profile lets a
// container create a socket of a family (socket(2)'s first argument) on
// goarch: one of the profile's allow rules for socket holds for it. The
// profile allows families by their number (AF_VSOCK and AF_ALG are left
// out); a socket rule without conditions would allow every family.
func dockerSocketFamilies(goarch string) func(family uint64) bool {
	var rules [][]specs.LinuxSeccompArg
	for _, sc := range seccomp.DefaultProfile().Syscalls {
		if sc.Action != "SCMP_ACT_ALLOW" || !slices.Contains(sc.Names, "socket") {
			continue
		}
		if inc := sc.Includes; inc != nil && len(inc.Arches) > 0 && !slices.Contains(inc.Arches, goarch) {
			continue
		}
		rules = append(rules, sc.Args)
	}
	return func(family uint64) bool {
		for _, args := range rules {
			holds := true
			for _, a := range args {
				if a.Index == 0 && !argHolds(a, family) {
					holds = false
				}
			}
			if holds {
				return true
			}
		}
		return false
	}
}

func argHolds(a specs.LinuxSeccompArg, v uint64) bool {
	switch a.Op {
	case specs.OpEqualTo:
		return v == a.Value
	case specs.OpNotEqual:
		return v != a.Value
	case specs.OpLessThan:
		return v < a.Value
	case specs.OpLessEqual:
		return v <= a.Value
	case specs.OpGreaterThan:
		return v > a.Value
	case specs.OpGreaterEqual:
		return v >= a.Value
	case specs.OpMaskedEqual:
		return v&a.Value == a.ValueTwo
	}
	return false
}
