package client

import (
	"strings"

	"github.com/microvms/microvms/gen/taxonomy"
)

// Region is an AWS region where MicroVMs are known to answer, or an unlisted
// one that a caller chose explicitly with UnlistedRegion. Only ParseRegion,
// UnlistedRegion and the five values below make one; the zero Region is no
// region at all and every caller must refuse it.
type Region struct {
	name     string
	unlisted bool
}

// The five regions that carry MicroVMs (api/errors.yaml `regions`).
var (
	USEast1      = Region{name: "us-east-1"}
	USEast2      = Region{name: "us-east-2"}
	USWest2      = Region{name: "us-west-2"}
	EUWest1      = Region{name: "eu-west-1"}
	APNortheast1 = Region{name: "ap-northeast-1"}
)

// Regions lists the supported regions in the generated table's order.
func Regions() []Region {
	out := make([]Region, len(taxonomy.Regions))
	for i, name := range taxonomy.Regions {
		out[i] = Region{name: name}
	}
	return out
}

func supportedRegion(name string) (Region, bool) {
	for _, n := range taxonomy.Regions {
		if n == name {
			return Region{name: n}, true
		}
	}
	return Region{}, false
}

// ParseRegion accepts exactly one of the supported region names. Any other
// string, including a near miss in case or whitespace, is refused locally:
// there the service answers AccessDeniedException with a null message, which
// reads like an IAM denial and sends the caller to audit a policy that is fine.
func ParseRegion(s string) (Region, error) {
	if r, ok := supportedRegion(s); ok {
		return r, nil
	}
	return Region{}, Errorf(taxonomy.KindInvalidArg, taxonomy.RegionFinding,
		"region %q does not carry MicroVMs (supported: %s); there the first API call fails with an AccessDeniedException whose message is null, indistinguishable from an IAM denial. If AWS has since launched MicroVMs in %q, pass client.UnlistedRegion(%q)",
		s, strings.Join(taxonomy.Regions, ", "), s, s)
}

// UnlistedRegion is the escape hatch for a region this client has not seen
// carry MicroVMs. What it costs: the local check is gone, so a region without
// the service fails on its first call as an AccessDeniedException with a null
// message rather than as a clear refusal, and the cost engine has no rate
// table for it (its lines come out unpriced). A supported name is normalised
// back to its listed value, so UnlistedRegion("us-east-1") == USEast1.
func UnlistedRegion(name string) Region {
	if r, ok := supportedRegion(name); ok {
		return r
	}
	return Region{name: name, unlisted: true}
}

// String is the region's AWS name, e.g. "us-east-1".
func (r Region) String() string { return r.name }

// Supported reports whether r is one of the listed regions.
func (r Region) Supported() bool { return r.name != "" && !r.unlisted }

// IsZero reports whether r is the zero Region, which names no region.
func (r Region) IsZero() bool { return r.name == "" }
