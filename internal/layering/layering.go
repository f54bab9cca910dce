// Package layering states the module's dependency direction as data, so a
// test can hold the code to it:
//
//	api, schema → gen (and docs) → agentd | client | localvm → imagebuild → emulator → cmd
//
// localvm (the guest runtime: a MicroVM as confined local processes) and
// imagebuild (the Dockerfile executor over it) sit below the emulator: they
// know nothing of the control plane it fakes, the library or the daemon's
// code, so the emulator drives them only through the Launcher seam and
// Options.Build, and a later backend beside the runtime obeys the same rule.
// gen/ is generated and imports nothing of ours but gen/; agentd (the daemon
// inside the VM) and client (the library) never import each other, the
// emulator or a command; the emulator is a development stand-in that may use
// the library and the generated contracts but not the daemon's code (it runs
// agentd as a process); nothing imports cmd/ but a command its own internal
// packages (cmd/NAME/internal/...); and a command reaches the
// control plane only through the library (client/sandbox, client/platform),
// never its generated SDK client/lambdamicrovms. It must never hold
// behaviour beyond reading the graph `go list` reports.
package layering

import (
	"fmt"
	"sort"
	"strings"
)

// Module is this module's import path.
const Module = "github.com/microvms/microvms"

// Graph maps a package (path relative to Module) to the packages of this
// module it imports, also relative.
type Graph map[string][]string

// rule says which of this module's packages a layer may import, by prefix.
type rule struct {
	layer  string   // prefix of the importing package
	may    []string // prefixes it may import
	mayNot []string // prefixes it may not import even so
}

// rules, most specific layer first. A package matching no layer is refused,
// so a new top-level directory has to be placed here deliberately.
var rules = []rule{
	{layer: "gen/", may: []string{"gen/"}},
	{layer: "api", may: []string{}},
	{layer: "docs", may: []string{}}, // the generated JSON documents, embedded
	// Measuring tools (tools/floord, scripts/bench/floorpeer) stand beside
	// the daemon and the engine, not on them: they keep their own copy of
	// what they speak, so nothing of the project moves their figures.
	{layer: "tools/", may: []string{}},
	{layer: "scripts/", may: []string{}},
	{layer: "schema", may: []string{"schema", "internal/"}},
	// testvm, the guest tests' shared helpers, drives guests through the
	// library's session; it is a test tool, so nothing shipped carries it.
	{layer: "internal/testvm", may: []string{"internal/", "gen/", "client"}},
	{layer: "internal/", may: []string{"internal/", "gen/"}},
	{layer: "agentd", may: []string{"agentd", "gen/", "internal/", "docs"}},
	{layer: "client", may: []string{"client", "gen/", "internal/"}},
	// The guest runtime and the image builder are below the control-plane
	// fake: the runtime imports nothing of this module's but the generated
	// contracts and internal tools; the builder adds the runtime.
	// What runs inside a guest before its program is a binary of its own
	// too (cmd/microvm-guest-init), whose start is most of a guest's, so it
	// must stay small: nothing of the module, nothing heavy.
	{layer: "localvm/guestinit", may: []string{"internal/netpolicy/guestlink"}},
	{layer: "localvm", may: []string{"localvm", "gen/", "internal/"}},
	{layer: "imagebuild", may: []string{"imagebuild", "localvm", "gen/", "internal/"}},
	// The emulator's IAM slice is a service of its own (LocalStack's
	// shape): handed what it needs, it reaches into nothing of the module.
	{layer: "emulator/iam", may: []string{}},
	{layer: "emulator", may: []string{"emulator", "imagebuild", "localvm", "client", "gen/", "internal/"}},
	// The guest's init is that package and nothing else; the daemon every
	// image runs links none of the local runtime (its resident size is a
	// measured target, and an image's daemon is not the emulator's).
	{layer: "cmd/microvm-guest-init", may: []string{"localvm/guestinit"}},
	{layer: "cmd/agentd", may: []string{"agentd", "gen/", "internal/"}},
	// A command parses, calls and renders: the platform is the library's
	// (client/platform), so the control plane's SDK is out of its reach.
	// It may import localvm for Init alone (main's first call).
	{layer: "cmd/", may: []string{"agentd", "client", "emulator", "localvm", "gen/", "internal/", "api", "schema", "docs"}, mayNot: []string{"client/lambdamicrovms"}},
}

// Check returns every import in g that points the wrong way, sorted.
func Check(g Graph) []string {
	var bad []string
	for pkg, imports := range g {
		r, ok := layerOf(pkg)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s belongs to no layer; place it in internal/layering", pkg))
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, "cmd/") {
				if !ownPart(pkg, imp) {
					bad = append(bad, fmt.Sprintf("%s imports %s: nothing imports cmd/ but the command its internal packages belong to", pkg, imp))
				}
				continue
			}
			if !allowed(r, imp) {
				bad = append(bad, fmt.Sprintf("%s imports %s: the %s layer may import only %v", pkg, imp, r.layer, r.may))
				continue
			}
			for _, p := range r.mayNot {
				if within(imp, p) {
					bad = append(bad, fmt.Sprintf("%s imports %s: the %s layer may not import %s; call the library (client/sandbox, client/platform)", pkg, imp, r.layer, p))
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// ownPart reports whether imp is one of the command's own packages
// (cmd/NAME/internal/...) and pkg is that command or another of its parts.
func ownPart(pkg, imp string) bool {
	parts := strings.SplitN(imp, "/", 3)
	if len(parts) < 3 || !strings.HasPrefix(parts[2], "internal/") {
		return false
	}
	return within(pkg, parts[0]+"/"+parts[1])
}

func layerOf(pkg string) (rule, bool) {
	for _, r := range rules {
		if within(pkg, r.layer) {
			return r, true
		}
	}
	return rule{}, false
}

func allowed(r rule, imp string) bool {
	for _, p := range r.may {
		if within(imp, p) {
			return true
		}
	}
	return false
}

// within reports whether pkg is the package prefix names or below it.
func within(pkg, prefix string) bool {
	base := strings.TrimSuffix(prefix, "/")
	return pkg == base || strings.HasPrefix(pkg, base+"/")
}
